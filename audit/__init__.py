"""The tamper-evident audit log: its model, the hash chain (record, verify), the pages, the
export and the API routes. Every app writes it (through :func:`audit.trail.record`); it depends
on none of them."""
