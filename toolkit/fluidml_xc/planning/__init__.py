"""Building blocks of the static memory planner; the API is `fluidml_xc.planner`."""
