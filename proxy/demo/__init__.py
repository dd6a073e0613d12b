"""The bundled demo legacy server (``python -m proxy.demo``)."""
