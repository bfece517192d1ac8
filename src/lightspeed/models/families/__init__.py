"""The model families' declarations, one module each (``FAMILY``); ``lightspeed.models.family``
defines :class:`~lightspeed.models.family.Family` and lists these modules in its registry."""
