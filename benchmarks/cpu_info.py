"""The CPU's model name, for the machine line every CPU benchmark prints."""

import platform


def cpu_model() -> str:
    """``model name`` from /proc/cpuinfo, else what ``platform`` knows."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()
