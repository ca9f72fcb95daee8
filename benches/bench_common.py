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


def outlined_simd_calls(binary):
    """Calls to AVX/AVX2/AVX-512/FMA/F16C intrinsics left as functions in a release binary.

    An intrinsic is inlined only into a function compiled with its feature; inside a closure
    (which does not inherit the features of the kernel it sits in when that kernel gets them
    from its caller) it can stay a call, and a kernel then runs several times slower (a Q6_K
    decode lost 38 % this way). Returns "caller -> intrinsic" lines; empty when objdump is
    missing.
    """
    import re
    import shutil
    import subprocess
    if not shutil.which("objdump"):
        return []
    out = subprocess.run(["objdump", "-d", "--no-show-raw-insn", "-C", binary],
                         capture_output=True, text=True, check=True).stdout
    pat = re.compile(r"(call|jmp)\s.*<(core::core_arch::x86::(avx|avx2|avx512\w*|fma|f16c)::\w+)>")
    found, fn = set(), "?"
    for line in out.splitlines():
        if line.endswith(">:"):
            fn = line.split("<", 1)[1][:-2]
            continue
        m = pat.search(line)
        if m:
            found.add(f"{fn} -> {m.group(2)}")
    return sorted(found)

