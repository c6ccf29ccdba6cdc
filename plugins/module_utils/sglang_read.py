# Copyright: sglang-deploy contributors
# SPDX-License-Identifier: Apache-2.0
"""Reading what comes from outside the module: files that must be regular files of a sane
size, command output decoded leniently, numbers that must be finite and in range.

A FIFO at a file's name would block an open() for ever, a link to /dev/zero would be read until
memory runs out, a byte that is not UTF-8 would raise in the middle of a module, an `inf` or a
400-digit number from a command would overflow an int(): each is a clear error or an unknown
value here instead. Standard library only (modules import it on the host).
"""

import math
import os
import stat

# A checkpoint's config.json, a release's packages.txt, a worker's state: kilobytes. Beyond
# this they are not what they claim to be.
DEFAULT_CAP = 8 << 20


class NotRegularFile(OSError):
    """A file that is not a regular file, or too large to be what it claims."""


def read_bytes(path, cap=DEFAULT_CAP, follow=True):
    """The bytes of regular file `path` (symlinks to regular files followed unless `follow` is
    false: a file another account writes), at most `cap`.

    Opened non-blocking, so that a FIFO does not wait for a writer; fstat on the open file
    decides, so nothing is swapped in between a check and the read.
    """
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOCTTY", 0)
    fd = os.open(path, flags if follow else flags | os.O_NOFOLLOW)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise NotRegularFile(f"{path} is not a regular file ({_kind(info.st_mode)}): refused")
        if info.st_size > cap:
            raise NotRegularFile(f"{path} is {info.st_size} bytes, more than {cap} a file of "
                                 "its kind can be: refused")
        chunks, size = [], 0
        while True:
            chunk = os.read(fd, min(1 << 20, cap + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
            if size > cap:
                raise NotRegularFile(f"{path} grew past {cap} bytes while read: refused")
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_text(path, cap=DEFAULT_CAP, follow=True):
    """read_bytes decoded as UTF-8, bytes that are not UTF-8 replaced (U+FFFD)."""
    return read_bytes(path, cap, follow).decode("utf-8", "replace")


def existing_text(path, cap=DEFAULT_CAP):
    """read_text, None when there is no file at `path`: the content a writer compares what it
    would write with."""
    try:
        return read_text(path, cap)
    except FileNotFoundError:
        return None


def _kind(mode):
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISDIR, "a directory"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def text_of(data):
    """Command output as text, whatever bytes it holds (undecodable ones replaced)."""
    if data is None:
        return ""
    if isinstance(data, bytes):
        return data.decode("utf-8", "replace")
    return str(data)


def number(text, low, high, integer=True):
    """A number read from outside (`text`, or an int/float) when finite and within
    [low, high], else None (unknown): `inf`, `nan`, `-5`, a 400-digit string."""
    if isinstance(text, bool):
        return None
    if isinstance(text, (int, float)):
        value = text
    else:
        text = str(text).strip()
        if not text or len(text) > 32:
            return None
        try:
            value = float(text)
        except ValueError:
            return None
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if not low <= value <= high:
        return None
    return int(value) if integer else value
