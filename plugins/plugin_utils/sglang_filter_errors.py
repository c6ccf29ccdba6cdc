"""One error type out of every filter, whatever the input."""

import functools

from ansible.errors import AnsibleFilterError

# What a filter raises when a value has a shape it did not expect.
SHAPE_ERRORS = (TypeError, AttributeError, KeyError, IndexError, ValueError, OverflowError)


def own_errors(func):
    """Turn a shape error deep inside a filter into AnsibleFilterError naming the filter."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except AnsibleFilterError:
            raise
        except SHAPE_ERRORS as exc:
            raise AnsibleFilterError(
                f"{func.__name__}: unexpected input ({type(exc).__name__}: {exc}); "
                "check the variables and facts passed to it") from exc

    return wrapper
