"""Test helpers shared by the suite: a scriptable loopback HTTP target server."""
