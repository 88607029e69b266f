"""Template spec: the model of `lifecycle_hooks:`, its loader, validation and schema."""
