#!/usr/bin/python
# Copyright: sglang-deploy contributors
# SPDX-License-Identifier: Apache-2.0
"""Draw the finalists of a tuning sweep: tok/s per user and output tok/s against concurrency,
as the serving benchmark measured them."""

DOCUMENTATION = r"""
module: sglang_tune_chart
short_description: Save a PNG chart of the finalists of playbooks/tune.yml
description:
  - Two panels, tok/s per user and output tok/s against concurrency, one line per finalist,
    as the serving benchmark (sglang_serving_bench) measured them at the workload. Runs on the
    controller (delegate_to localhost) with matplotlib (requirements.txt); the file is
    rewritten only when its content changes.
options:
  finalists:
    description:
      - "Finalists, each with C(id), C(release) and C(final_levels): the levels of
        sglang_serving_bench, each with C(concurrency), C(tok_s_per_user) and C(output_tok_s)."
      - At most 64 finalists of at most 1,000 levels each (a chart, not a data dump); an id is
        drawn with its first 60 characters.
    type: list
    elements: dict
    required: true
  title:
    description: Chart title (at most 200 characters).
    type: str
    default: sglang tune
  dest:
    description: Path of the PNG.
    type: path
    required: true
notes:
  - Not a builtin because there is no equivalent; no builtin draws a chart, and
    M(ansible.builtin.copy) writes text content, not a PNG built on the controller.
author:
  - sglang-deploy maintainers (@sglang-deploy)
"""

EXAMPLES = r"""
- name: Draw the finalists next to tune.json
  sglang.deploy.sglang_tune_chart:
    finalists: "{{ finalists }}"
    title: sglang tune on gpu1
    dest: tune/gpu1/tune.png
  delegate_to: localhost
"""

RETURN = r"""
dest:
  description: Path of the PNG.
  type: str
  returned: always
lines:
  description: Lines drawn (one per finalist).
  type: int
  returned: always
"""

import io
import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.sglang.deploy.plugins.module_utils.sglang_files import write_atomic


# What a chart can show; beyond these, drawing takes minutes (a 2 MB title is laid out glyph by
# glyph) and shows nothing more.
MAX_TITLE = 200
MAX_LINES = 64
MAX_LEVELS = 1000
MAX_LABEL = 60


def too_much(finalists, title):
    """Why this is more than a chart can show (None when it is not)."""
    if len(title) > MAX_TITLE:
        return f"title: {len(title)} characters, at most {MAX_TITLE}"
    if len(finalists) > MAX_LINES:
        return f"finalists: {len(finalists)}, at most {MAX_LINES} lines"
    for fin in finalists:
        levels = fin.get("final_levels")
        if isinstance(levels, list) and len(levels) > MAX_LEVELS:
            return (f"finalist {str(fin.get('id'))[:MAX_LABEL]!r}: {len(levels)} levels, at most "
                    f"{MAX_LEVELS}")
    return None


def series(finalist, metric):
    points = sorted((lv["concurrency"], lv.get(metric)) for lv in finalist.get("final_levels") or []
                    if isinstance(lv.get(metric), (int, float)))
    return [point[0] for point in points], [point[1] for point in points]


def draw(finalists, title):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4), dpi=80)
    for ax, metric, label in ((axes[0], "tok_s_per_user", "tok/s per user"),
                              (axes[1], "output_tok_s", "output tok/s")):
        for fin in finalists:
            xs, ys = series(fin, metric)
            if xs:
                ax.plot(xs, ys, marker="o", label=str(fin.get("id", "?"))[:MAX_LABEL])
        ax.set_xlabel("concurrency")
        ax.set_ylabel(label)
        ax.grid(True, alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    buf = io.BytesIO()
    # A fixed creation date in the metadata keeps the bytes stable for the same figures.
    fig.savefig(buf, format="png", metadata={"Software": None})
    plt.close(fig)
    return buf.getvalue()


def main():
    module = AnsibleModule(
        argument_spec={
            "finalists": {"type": "list", "elements": "dict", "required": True},
            "title": {"type": "str", "default": "sglang tune"},
            "dest": {"type": "path", "required": True},
        },
        supports_check_mode=True,
    )
    p = module.params
    if not p["dest"] or os.path.isdir(p["dest"]):
        module.fail_json(msg=f"dest {p['dest']!r} must name a file (the PNG), not a directory")
    if not all(isinstance(f, dict) for f in p["finalists"]):
        module.fail_json(msg="finalists must be mappings with id and final_levels")
    why = too_much(p["finalists"], p["title"])
    if why:
        module.fail_json(msg=f"more than a chart shows: {why}")
    try:
        data = draw(p["finalists"], p["title"])
    except ImportError:
        module.fail_json(msg="matplotlib is missing on the controller: pip install -r requirements.txt")
    except (TypeError, ValueError, KeyError, AttributeError) as exc:
        module.fail_json(msg=f"finalists: a level without numbers ({type(exc).__name__}: {exc})")
    old = None
    try:
        if os.path.exists(p["dest"]):
            with open(p["dest"], "rb") as handle:
                old = handle.read()
        changed = old != data
        if changed and not module.check_mode:
            write_atomic(p["dest"], data, move=module.atomic_move)
    except OSError as exc:
        module.fail_json(msg=f"cannot write the chart to {p['dest']}: {exc}")
    module.exit_json(changed=changed, dest=p["dest"], lines=len(p["finalists"]))


if __name__ == "__main__":
    main()
