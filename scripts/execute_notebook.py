#!/usr/bin/env python3
"""Executes a Jupyter notebook and writes it back with its outputs.

    python3 scripts/execute_notebook.py samples/01_gemm_fp16.ipynb --out executed.ipynb

Uses nbclient (a real Jupyter kernel) when it is installed. Otherwise -- the device
machine has no Jupyter -- runs the code cells in order in one namespace of this
interpreter, recording what they print as stream outputs and stopping at the first
exception with an error output, which is what `jupyter nbconvert --execute` does for
cells that print. Exit status 1 if a cell raised.
"""
import argparse
import contextlib
import io
import json
import sys
import traceback


def run_with_nbclient(notebook_path, out_path):
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(notebook_path, as_version=4)
    NotebookClient(nb, timeout=600, kernel_name="python3").execute()
    nbformat.write(nb, out_path)
    return 0


def run_in_process(notebook_path, out_path):
    with open(notebook_path) as f:
        nb = json.load(f)
    namespace = {"__name__": "__main__"}
    status, count = 0, 0
    for cell in nb["cells"]:
        if cell["cell_type"] != "code":
            continue
        count += 1
        cell["execution_count"] = count
        cell["outputs"] = []
        stdout, stderr = io.StringIO(), io.StringIO()
        error = None
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            try:
                exec(compile("".join(cell["source"]), f"<cell {count}>", "exec"), namespace)
            except Exception as e:  # recorded in the notebook, as Jupyter does
                error = e
        for name, buffer in (("stdout", stdout), ("stderr", stderr)):
            if buffer.getvalue():
                cell["outputs"].append({"output_type": "stream", "name": name,
                                        "text": buffer.getvalue().splitlines(True)})
        if error is not None:
            cell["outputs"].append({"output_type": "error", "ename": type(error).__name__,
                                    "evalue": str(error),
                                    "traceback": traceback.format_exception(error)})
            print(f"cell {count} raised {type(error).__name__}: {error}", file=sys.stderr)
            status = 1
            break
    nb["metadata"]["executed_by"] = "scripts/execute_notebook.py (in-process, no Jupyter kernel)"
    with open(out_path, "w") as f:
        json.dump(nb, f, indent=1)
        f.write("\n")
    return status


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("notebook")
    parser.add_argument("--out", required=True)
    parser.add_argument("--in-process", action="store_true", help="do not use nbclient even if installed")
    args = parser.parse_args()
    if not args.in_process:
        try:
            import nbclient  # noqa: F401
            import nbformat  # noqa: F401
        except ImportError:
            pass
        else:
            return run_with_nbclient(args.notebook, args.out)
    return run_in_process(args.notebook, args.out)


if __name__ == "__main__":
    sys.exit(main())
