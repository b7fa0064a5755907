import subprocess
import sys


def test_core_imports_without_torch():
    # The core must never pull torch in: block it and import everything torch-free.
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "import headroom, headroom._core\n"
        "assert 'torch' not in [m for m in sys.modules if sys.modules[m] is not None]\n"
        "print(headroom.__version__)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == __import__("headroom").__version__
