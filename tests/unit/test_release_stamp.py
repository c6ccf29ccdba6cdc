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
        msg: "STAMP {{ __sglang_release_stamp }} {{ __sglang_run_id }}"
    - name: Let the next batch start in another second
      ansible.builtin.pause:
        seconds: 2
      run_once: true
"""


def _stamps(proc):
    """{host: (stamp, run id)} a run printed."""
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, out[-3000:]
    report = json.loads(out[out.index("{"):])
    return {host: tuple(result["msg"].split()[1:]) for play in report["plays"]
            for task in play["tasks"] for host, result in task["hosts"].items()
            if str(result.get("msg", "")).startswith("STAMP ")}


def test_one_stamp_for_every_batch_and_a_lock_id_of_its_own_for_every_run(tmp_path):
    (tmp_path / "play.yml").write_text(PLAYBOOK, encoding="utf-8")
    (tmp_path / "hosts.yml").write_text(
        "all:\n  vars:\n    ansible_connection: local\n"
        "  hosts:\n    canary:\n    second:\n    third:\n", encoding="utf-8")
    env = dict(os.environ, ANSIBLE_STDOUT_CALLBACK="ansible.posix.json",
               ANSIBLE_ROLES_PATH=str(ROOT / "roles"))
    # Two runs started together (most often within one second: the same stamp).
    runs = [subprocess.Popen(["ansible-playbook", "-i", str(tmp_path / "hosts.yml"),
                              str(tmp_path / "play.yml")], cwd=ROOT, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            for _ in range(2)]
    first, second = (_stamps(run) for run in runs)
    assert set(first) == set(second) == {"canary", "second", "third"}
    assert len(set(first.values())) == 1 and len(set(second.values())) == 1, (first, second)
    (stamp, run_id), (other_stamp, other_id) = first["canary"], second["canary"]
    print(f"stamps {stamp} {other_stamp}, lock ids {run_id} {other_id}")
    # The stamp names releases; the lock id is the stamp and 48 random bits: never shared.
    assert run_id.startswith(stamp + "-") and other_id.startswith(other_stamp + "-")
    assert run_id != other_id
