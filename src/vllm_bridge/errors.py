"""The one exception type for bad user input, so callers can print it cleanly."""


class BridgeConfigError(Exception):
    """Bad user input (env var, additional config, CLI argument), or a
    machine that cannot run the requested config.

    The message names the input and the fix. Deliberately not a ValueError:
    platform hooks run inside VllmConfig's pydantic validation, which would
    bury a ValueError's message inside a ValidationError.
    """
