"""Local stand-ins for the clouds' APIs: real HTTP servers on 127.0.0.1 that speak each cloud's
wire format to its real SDK, keep state, record every request and inject errors on demand."""
