"""Run many train.py / eval.py command lines cheaply, each exactly as `python SCRIPT ARGS...` would,
for tests/test_bad_input.py.

Reads [[script, [args...]], ...] as JSON on stdin; imports the heavy modules once, then runs every
case in a forked child whose stdout and stderr are files, with the interpreter's own handling of
SystemExit (None -> 0, an int -> that status, anything else printed to stderr -> 1) and of any other
exception (a traceback, status 1). Writes [{"rc", "stdout", "stderr"}, ...] as JSON on stdout.
"""
import json
import os
import runpy
import sys
import tempfile
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import torch  # noqa: F401  (imported once, before the forks)
import transformers  # noqa: F401
import train  # noqa: F401
import eval as _eval  # noqa: F401


def run_case(script, args, out_path, err_path):
    pid = os.fork()
    if pid == 0:
        out, err = os.open(out_path, os.O_WRONLY), os.open(err_path, os.O_WRONLY)
        os.dup2(out, 1)
        os.dup2(err, 2)
        code = 0
        try:
            sys.argv = [os.path.join(ROOT, script), *args]
            runpy.run_path(sys.argv[0], run_name="__main__")
        except SystemExit as exit_:
            if exit_.code is None:
                code = 0
            elif isinstance(exit_.code, int):
                code = exit_.code
            else:
                print(exit_.code, file=sys.stderr)
                code = 1
        # any failure ends this command only, as in its own process
        except BaseException:  # noqa: BLE001
            traceback.print_exc()
            code = 1
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def main():
    cases = json.load(sys.stdin)
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for i, (script, args) in enumerate(cases):
            out_path, err_path = os.path.join(tmp, f"{i}.out"), os.path.join(tmp, f"{i}.err")
            for path in (out_path, err_path):
                open(path, "w").close()
            rc = run_case(script, args, out_path, err_path)
            with open(out_path) as o, open(err_path) as e:
                results.append({"rc": rc, "stdout": o.read(), "stderr": e.read()})
    json.dump(results, sys.__stdout__)


if __name__ == "__main__":
    main()
