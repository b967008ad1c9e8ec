"""The numpy reference backend (``riftco.backends.cpu``)."""
