"""Users, roles, API tokens and sign-in: who may do what in Strata. Every app uses it; it depends
only on the audit log (every change of access is audited)."""
