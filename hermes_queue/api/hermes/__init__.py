"""Hermes' own dialect: runs, approvals, sessions, session chat and scheduled jobs, each as
handlers, the bodies they validate, the answers they document, their renderers and route
rows."""
