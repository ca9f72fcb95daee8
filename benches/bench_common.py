"""Helpers shared by the Python benchmark drivers."""
import platform


def cpu_model():
    """The CPU's model name (/proc/cpuinfo), or what `platform` knows."""
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()
