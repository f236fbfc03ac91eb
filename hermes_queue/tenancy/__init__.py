"""Tenants: whose keys resolve to whom (``keys.py``) and what each may queue and run
(``limits.py``). docs/tenants.md."""
