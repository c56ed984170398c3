"""Run many command lines cheaply, each exactly as `python SCRIPT ARGS...` would (or `python -c CODE
ARGS`, `python -m MODULE ARGS`), for the tests (conftest.run_batch and run_python).

Imports the heavy modules once, then serves batches until its stdin ends. Each line of stdin is a
batch, as JSON: [[script, [args...]] or [script, [args...], {"cwd": DIR, "env": {NAME: VALUE}}],
...] (script "-c": args[0] is the code; "-m": args[0] is the module; cwd: ROOT if not given; env:
set in the child, a value null unset, so not what torch reads at its import). Every case runs in
a forked child whose stdin is /dev/null and whose stdout and stderr are files, with the
interpreter's own handling of SystemExit (None -> 0, an int -> that status, anything else printed
to stderr -> 1) and of any other exception (a traceback, status 1). Each batch's answer is one line
on stdout, [{"rc", "stdout", "stderr"}, ...] as JSON. This process runs no case itself: each fork
starts from the same state.
"""
import json
import os
import runpy
import sys
import tempfile
import traceback
import types

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[0] = ROOT              # not tests/: a case's sys.path[0] replaces it

import torch  # noqa: F401  (imported once, before the forks)
import transformers  # noqa: F401
import train  # noqa: F401
import eval as _eval  # noqa: F401


def run_case(script, args, out_path, err_path, cwd=None, env=None):
    """`python SCRIPT ARGS` (or `python -c CODE ARGS`, `python -m MODULE ARGS`) in a forked child,
    in `cwd` (default ROOT) with `env` added to the environment; returns its exit status."""
    pid = os.fork()
    if pid == 0:
        out, err = os.open(out_path, os.O_WRONLY), os.open(err_path, os.O_WRONLY)
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)      # not the next batch
        os.dup2(out, 1)
        os.dup2(err, 2)
        code = 0
        try:
            os.chdir(cwd or ROOT)
            for name, value in (env or {}).items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
            if script == "-c":                            # sys.path[0] = '' as for python -c
                sys.argv, sys.path[0] = ["-c", *args[1:]], ""
                sys.modules["__main__"] = main = types.ModuleType("__main__")
                exec(compile(args[0], "<string>", "exec"), main.__dict__)  # noqa: S102 (python -c)
            elif script == "-m":
                sys.argv, sys.path[0] = [args[0], *args[1:]], os.getcwd()
                runpy.run_module(args[0], run_name="__main__", alter_sys=True)
            else:
                sys.argv = [os.path.join(ROOT, script), *args]
                sys.path[0] = os.path.dirname(sys.argv[0])
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


def run_batch(cases):
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for i, (script, args, *options) in enumerate(cases):
            out_path, err_path = os.path.join(tmp, f"{i}.out"), os.path.join(tmp, f"{i}.err")
            for path in (out_path, err_path):
                open(path, "w").close()
            rc = run_case(script, args, out_path, err_path, **(options[0] if options else {}))
            with open(out_path) as o, open(err_path) as e:
                results.append({"rc": rc, "stdout": o.read(), "stderr": e.read()})
    return results


def main():
    for line in sys.stdin:
        sys.__stdout__.write(json.dumps(run_batch(json.loads(line))) + "\n")
        sys.__stdout__.flush()


if __name__ == "__main__":
    main()
