"""Just enough of ELF (64-bit little-endian, x86-64) for the view: the
program interpreter, DT_NEEDED, DT_SONAME, DT_RPATH and DT_RUNPATH, read
from the file itself so that build-view and check-view need nothing but
Python's standard library (check-view runs on any host, on an extracted
view)."""

import struct

PT_LOAD, PT_DYNAMIC, PT_INTERP = 1, 2, 3
DT_NULL, DT_NEEDED, DT_STRTAB, DT_SONAME, DT_RPATH, DT_RUNPATH = \
    0, 1, 5, 14, 15, 29
ET_EXEC, ET_DYN = 2, 3


def is_elf(path):
    try:
        with open(path, "rb") as fh:
            return fh.read(4) == b"\x7fELF"
    except OSError:
        return False


class Elf:
    """The dynamic-linking facts of one ELF file."""

    def __init__(self, path):
        with open(path, "rb") as fh:
            data = fh.read()
        if data[:4] != b"\x7fELF":
            raise ValueError(f"{path}: not ELF")
        if data[4] != 2 or data[5] != 1:
            raise ValueError(f"{path}: not 64-bit little-endian ELF")
        self.path = path
        self.type, = struct.unpack_from("<H", data, 16)
        phoff, = struct.unpack_from("<Q", data, 32)
        phentsize, phnum = struct.unpack_from("<HH", data, 54)
        loads, dynamic = [], None
        self.interp = None
        for i in range(phnum):
            (p_type, _flags, off, vaddr, _paddr, filesz, _memsz,
             _align) = struct.unpack_from("<IIQQQQQQ", data,
                                          phoff + i * phentsize)
            if p_type == PT_LOAD:
                loads.append((vaddr, off, filesz))
            elif p_type == PT_DYNAMIC:
                dynamic = (off, filesz)
            elif p_type == PT_INTERP:
                self.interp = data[off:off + filesz].split(b"\0")[0].decode()
        self.dynamic = dynamic is not None
        self.needed, self.soname = [], None
        self.rpath = self.runpath = None
        if not dynamic:
            return
        entries, strtab = [], None
        off, size = dynamic
        for pos in range(off, off + size, 16):
            tag, val = struct.unpack_from("<qQ", data, pos)
            if tag == DT_NULL:
                break
            if tag == DT_STRTAB:
                strtab = val
            entries.append((tag, val))

        def vaddr_to_offset(addr):
            for vaddr, foff, fsize in loads:
                if vaddr <= addr < vaddr + fsize:
                    return addr - vaddr + foff
            raise ValueError(f"{path}: address {addr:#x} in no segment")

        base = vaddr_to_offset(strtab)

        def string(index):
            end = data.index(b"\0", base + index)
            return data[base + index:end].decode()

        for tag, val in entries:
            if tag == DT_NEEDED:
                self.needed.append(string(val))
            elif tag == DT_SONAME:
                self.soname = string(val)
            elif tag == DT_RPATH:
                self.rpath = string(val)
            elif tag == DT_RUNPATH:
                self.runpath = string(val)
