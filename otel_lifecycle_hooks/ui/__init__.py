"""`otel-lifecycle-hooks ui`: a local web page of the journal's sessions, their deliveries and
each delivery's attempts, with a Redeliver button that runs `replay`.

`views` turns journal rows into what the page is sent, `access` decides which requests are
answered (loopback Host, token, CSRF header), `server` is the HTTP server, and `static/` holds
the page itself: plain HTML, CSS and JavaScript, nothing fetched from elsewhere.
"""
