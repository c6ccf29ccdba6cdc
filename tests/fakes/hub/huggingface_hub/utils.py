"""huggingface_hub.utils.filter_repo_objects, as the real one filters by glob (an empty
allow list matches nothing, as there)."""

import fnmatch


def filter_repo_objects(items, allow_patterns=None, ignore_patterns=None):
    allow = [allow_patterns] if isinstance(allow_patterns, str) else allow_patterns
    ignore = [ignore_patterns] if isinstance(ignore_patterns, str) else ignore_patterns
    for item in items:
        if allow is not None and not any(fnmatch.fnmatch(item, p) for p in allow):
            continue
        if ignore is not None and any(fnmatch.fnmatch(item, p) for p in ignore):
            continue
        yield item
