"""The folders of src/ include each other in no cycle (scripts/check-includes.py)."""
import os
import subprocess
import sys

root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
r = subprocess.run([sys.executable, os.path.join(root, "scripts", "check-includes.py")], capture_output=True, text=True)
sys.stdout.write(r.stdout)
sys.stderr.write(r.stderr)
sys.exit(0 if r.returncode == 0 else 1)
