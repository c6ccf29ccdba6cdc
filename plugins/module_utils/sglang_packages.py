# Copyright: sglang-deploy contributors
# SPDX-License-Identifier: Apache-2.0
"""The one validator of a recorded package set (a release's packages.txt, a set to restore).

A line is a PEP 508 distribution name, `==`, and a PEP 440 version (a local label such as
`+cu124` included): nothing else. No pip option (`--index-url`, `-e`, `-r`), no path, no URL,
no marker, no extra, no comparison but `==`: whatever else reached pip's requirements file
would let a release's file pick the index or run a build backend as root during a rollback.
Standard library only (it runs on the host, inside modules).
"""

import re

# PEP 508 names (ASCII letters and digits, with . _ - inside).
NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,198}[A-Za-z0-9])?")
# PEP 440 versions, public and local (packaging's VERSION_PATTERN, written out, ASCII only).
VERSION = re.compile(
    r"(?:[0-9]{1,9}!)?[0-9]{1,18}(?:\.[0-9]{1,18}){0,15}"
    r"(?:[-_.]?(?:a|b|c|rc|alpha|beta|pre|preview)[-_.]?[0-9]{0,18})?"
    r"(?:-[0-9]{1,18}|[-_.]?(?:post|rev|r)[-_.]?[0-9]{0,18})?"
    r"(?:[-_.]?dev[-_.]?[0-9]{0,18})?"
    r"(?:\+[A-Za-z0-9]{1,64}(?:[-_.][A-Za-z0-9]{1,64}){0,15})?", re.IGNORECASE)
MAX_LINES = 5000
REQUIRED = "sglang"
# pip reads a requirement that ends like an archive as a file to install when one by that name
# is in its working directory (pip's ARCHIVE_EXTENSIONS): `x==1.0+evil.tar.gz` is a valid
# PEP 440 local version, and a path to pip. Refused whatever the case.
ARCHIVE_SUFFIXES = (".zip", ".whl", ".tar.bz2", ".tbz", ".tar.xz", ".txz", ".tlz", ".tar.lz",
                    ".tar.lzma", ".tar.gz", ".tgz", ".tar")


class PackageSetError(ValueError):
    """A set (or one of its lines) that must not reach an installer."""


def canonical(name):
    """PEP 503 name: Foo_Bar.baz and foo-bar-baz are the same distribution."""
    return re.sub(r"[-_.]+", "-", name).lower()


def package_line(line):
    """(name, version) of one `name==version` line; PackageSetError for anything else."""
    text = line.strip() if isinstance(line, str) else line
    name, sep, version = text.partition("==") if isinstance(text, str) else ("", "", "")
    if sep and version.lower().endswith(ARCHIVE_SUFFIXES):
        raise PackageSetError(
            f"{line!r:.80} ends like an archive ({version.lower().rsplit('.', 1)[-1]}): pip would "
            "read it as a file in its working directory; only name==version with a version "
            "that names no file")
    if not sep or not NAME.fullmatch(name) or not VERSION.fullmatch(version):
        raise PackageSetError(
            f"{line!r:.80} is not a package line: only name==version (a PEP 508 name and an "
            "exact PEP 440 version), no pip option, path, URL, marker or extra")
    return name, version


def is_comment(line):
    return isinstance(line, str) and (not line.strip() or line.lstrip().startswith("#"))


def package_set(lines, source="the recorded set", recorded=True):
    """{canonical name: (line, version)} of a set; comment and blank lines skipped.

    Every line must be `name==version`; a distribution may appear once. A `recorded` set (a
    release's, an env is built from it) must also hold packages, sglang among them: a set
    recorded while the venv had no Python, or cut short, would build an env without SGLang.
    """
    if not isinstance(lines, (list, tuple)):
        raise PackageSetError(f"{source}: a list of name==version lines, got {type(lines).__name__}")
    if len(lines) > MAX_LINES:
        raise PackageSetError(f"{source}: {len(lines)} lines, more than {MAX_LINES}")
    out = {}
    for line in lines:
        if is_comment(line):
            continue
        try:
            name, version = package_line(line)
        except PackageSetError as exc:
            raise PackageSetError(f"{source}: {exc}") from None
        key = canonical(name)
        if key in out:
            raise PackageSetError(f"{source}: {name} is listed twice ({out[key][0]!r} and "
                                  f"{line.strip()!r})")
        out[key] = (f"{name}=={version}", version)
    if recorded and not out:
        raise PackageSetError(f"{source} holds no package line: no env can be built from it; "
                              "refused")
    if recorded and REQUIRED not in out:
        raise PackageSetError(f"{source} holds no sglang line: not the set of a release; "
                              "refused")
    return out


def package_lines(lines, source="the recorded set", recorded=True):
    """The set's lines as `name==version`, in their order, after package_set's checks."""
    return [line for line, _unused in package_set(lines, source, recorded).values()]
