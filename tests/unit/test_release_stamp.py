"""One release stamp per run, across the batches of `serial: [1, "100%"]`.

`run_once` alone runs once per batch: the canary would get another release id than the hosts
after it. Three local hosts, a canary batch then the rest, and a pause between batches longer
than the stamp's resolution (1 s): every host must still get the same stamp.
"""

import json
import os
import subprocess

from support import ROOT

PLAYBOOK = """
- name: Stamp in batches, a canary first
  hosts: all
  gather_facts: false
  serial: [1, "100%"]
  tasks:
    # Public: the role's vars (vars/main.yml's __sglang_release_stamp) reach the tasks below.
    - name: Stamp
      ansible.builtin.include_role:
        name: sglang
        tasks_from: inputs/stamp
        public: true
    - name: Show the stamp as this batch's hosts see it
      ansible.builtin.debug:
        msg: "STAMP {{ __sglang_release_stamp }}"
    - name: Let the next batch start in another second
      ansible.builtin.pause:
        seconds: 2
      run_once: true
"""


def test_one_stamp_for_every_batch(tmp_path):
    (tmp_path / "play.yml").write_text(PLAYBOOK, encoding="utf-8")
    (tmp_path / "hosts.yml").write_text(
        "all:\n  vars:\n    ansible_connection: local\n"
        "  hosts:\n    canary:\n    second:\n    third:\n", encoding="utf-8")
    env = dict(os.environ, ANSIBLE_STDOUT_CALLBACK="ansible.posix.json",
               ANSIBLE_ROLES_PATH=str(ROOT / "roles"))
    proc = subprocess.run(["ansible-playbook", "-i", str(tmp_path / "hosts.yml"),
                           str(tmp_path / "play.yml")],
                          cwd=ROOT, env=env, capture_output=True, text=True, check=False,
                          timeout=120)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads(proc.stdout[proc.stdout.index("{"):])
    stamps = {host: result["msg"] for play in report["plays"] for task in play["tasks"]
              for host, result in task["hosts"].items()
              if str(result.get("msg", "")).startswith("STAMP ")}
    assert set(stamps) == {"canary", "second", "third"}
    assert len(set(stamps.values())) == 1, stamps
