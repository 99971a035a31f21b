"""Minimal GGUF v3 reader and writer (NumPy) for exporting models and writing fixtures.

Only what train/ needs: metadata of every scalar type, arrays of strings/ints/floats, and
tensors in F32, F16 or BF16. The C++ engine has its own, fully checked reader (format/gguf.cpp).
"""

import struct

import numpy as np

GGUF_MAGIC = b"GGUF"
ALIGNMENT = 32

# Metadata value types (GGUF specification numbering).
UINT8, INT8, UINT16, INT16, UINT32, INT32, FLOAT32, BOOL, STRING, ARRAY, UINT64, INT64, FLOAT64 = range(13)
_SCALAR_FMT = {UINT8: "<B", INT8: "<b", UINT16: "<H", INT16: "<h", UINT32: "<I", INT32: "<i",
               FLOAT32: "<f", BOOL: "<?", UINT64: "<Q", INT64: "<q", FLOAT64: "<d"}

# Tensor types (ggml numbering).
GGML_F32, GGML_F16, GGML_BF16 = 0, 1, 30
# How each type's elements are stored; BF16 is kept as its raw 16-bit patterns.
_TENSOR_DTYPE = {GGML_F32: np.float32, GGML_F16: np.float16, GGML_BF16: np.uint16}


def f32_to_bf16(array):
    """The bfloat16 bit patterns (uint16) of `array`: the upper half of each float32, rounded
    to nearest with ties to even, as PyTorch and llama.cpp's converter round. NaNs stay quiet
    NaNs rather than rounding into infinities."""
    u = np.ascontiguousarray(array, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    nan = np.isnan(np.asarray(array, dtype=np.float32))
    rounded = np.where(nan, (u >> 16) | 0x40, rounded)
    return rounded.astype(np.uint16)


def bf16_to_f32(bits):
    """The float32 values of bfloat16 bit patterns (uint16); exact."""
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


class GGUFWriter:
    """Collects metadata and tensors, then writes a GGUF v3 file in one go."""

    def __init__(self):
        self.kv = []  # (key, type, value[, element type])
        self.tensors = []  # (name, ggml type, numpy array)

    def add(self, key, vtype, value, elem_type=None):
        self.kv.append((key, vtype, value, elem_type))

    def add_u32(self, key, v):
        self.add(key, UINT32, int(v))

    def add_i32(self, key, v):
        self.add(key, INT32, int(v))

    def add_f32(self, key, v):
        self.add(key, FLOAT32, float(v))

    def add_bool(self, key, v):
        self.add(key, BOOL, bool(v))

    def add_string(self, key, v):
        self.add(key, STRING, v)

    def add_array(self, key, elem_type, values):
        self.add(key, ARRAY, list(values), elem_type)

    def add_tensor(self, name, array, ggml_type=GGML_F32):
        """`array` is in PyTorch/NumPy order ([out][in]); GGUF stores the reversed shape.

        For BF16, `array` holds the values (rounded here), not bit patterns.
        """
        if ggml_type == GGML_BF16:
            data = f32_to_bf16(array)
        else:
            data = np.ascontiguousarray(array, dtype=_TENSOR_DTYPE[ggml_type])
        self.tensors.append((name, ggml_type, data))

    @staticmethod
    def _string(s):
        b = s.encode("utf-8") if isinstance(s, str) else bytes(s)
        return struct.pack("<Q", len(b)) + b

    def _value(self, vtype, value, elem_type):
        if vtype == STRING:
            return self._string(value)
        if vtype == ARRAY:
            out = struct.pack("<IQ", elem_type, len(value))
            for v in value:
                out += self._value(elem_type, v, None)
            return out
        return struct.pack(_SCALAR_FMT[vtype], value)

    def write(self, path):
        head = GGUF_MAGIC + struct.pack("<IQQ", 3, len(self.tensors), len(self.kv))
        for key, vtype, value, elem_type in self.kv:
            head += self._string(key) + struct.pack("<I", vtype) + self._value(vtype, value, elem_type)
        offset = 0
        offsets = []
        for name, ggml_type, arr in self.tensors:
            shape = list(reversed(arr.shape))
            head += self._string(name) + struct.pack("<I", len(shape))
            head += b"".join(struct.pack("<Q", d) for d in shape)
            head += struct.pack("<IQ", ggml_type, offset)
            offsets.append(offset)
            offset += (arr.nbytes + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT
        head += b"\0" * ((-len(head)) % ALIGNMENT)
        with open(path, "wb") as f:
            f.write(head)
            for name, ggml_type, arr in self.tensors:
                data = arr.tobytes()
                f.write(data + b"\0" * ((-len(data)) % ALIGNMENT))


def _skip_value(buf, pos, vtype):
    if vtype == STRING:
        (n,) = struct.unpack_from("<Q", buf, pos)
        return pos + 8 + n
    if vtype == ARRAY:
        elem_type, n = struct.unpack_from("<IQ", buf, pos)
        pos += 12
        if elem_type in _SCALAR_FMT:
            return pos + n * struct.calcsize(_SCALAR_FMT[elem_type])
        for _ in range(n):
            pos = _skip_value(buf, pos, elem_type)
        return pos
    return pos + struct.calcsize(_SCALAR_FMT[vtype])


def set_string(path, key, value):
    """Sets string metadata `key` of the GGUF at `path` in place (added, or replaced if present).

    Tensor offsets are relative to the aligned data section, so only the header changes; the
    data is copied unchanged after re-padding to the file's alignment.
    """
    with open(path, "rb") as f:
        buf = f.read()
    if buf[:4] != GGUF_MAGIC:
        raise ValueError(f"{path}: not a GGUF file")
    version, n_tensors, n_kv = struct.unpack_from("<IQQ", buf, 4)
    pos = 24
    kvs = []  # raw bytes of every entry but `key`
    align = ALIGNMENT
    for _ in range(n_kv):
        start = pos
        (n,) = struct.unpack_from("<Q", buf, pos)
        name = buf[pos + 8:pos + 8 + n].decode("utf-8")
        pos += 8 + n
        (vtype,) = struct.unpack_from("<I", buf, pos)
        if name == "general.alignment":
            (align,) = struct.unpack_from("<I", buf, pos + 4)
        pos = _skip_value(buf, pos + 4, vtype)
        if name != key:
            kvs.append(buf[start:pos])
    info_start = pos
    for _ in range(n_tensors):
        (n,) = struct.unpack_from("<Q", buf, pos)
        pos += 8 + n
        (n_dims,) = struct.unpack_from("<I", buf, pos)
        pos += 4 + 8 * n_dims + 12
    infos = buf[info_start:pos]
    data = buf[(pos + align - 1) // align * align:]
    kvs.append(GGUFWriter._string(key) + struct.pack("<I", STRING) + GGUFWriter._string(value))
    head = GGUF_MAGIC + struct.pack("<IQQ", version, n_tensors, len(kvs)) + b"".join(kvs) + infos
    head += b"\0" * ((-len(head)) % align)
    with open(path, "wb") as f:
        f.write(head + data)


class GGUFReader:
    """Reads metadata and F32/F16/BF16 tensors (returned as float32 arrays in NumPy order)."""

    def __init__(self, path):
        with open(path, "rb") as f:
            self.buf = f.read()
        self.pos = 0
        if self.buf[:4] != GGUF_MAGIC:
            raise ValueError(f"{path}: not a GGUF file")
        self.pos = 4
        version, n_tensors, n_kv = self._unpack("<IQQ")
        if version not in (2, 3):
            raise ValueError(f"{path}: unsupported GGUF version {version}")
        self.metadata = {}
        for _ in range(n_kv):
            key = self._read_string()
            (vtype,) = self._unpack("<I")
            self.metadata[key] = self._read_value(vtype)
        align = self.metadata.get("general.alignment", ALIGNMENT)
        infos = []
        for _ in range(n_tensors):
            name = self._read_string()
            (n_dims,) = self._unpack("<I")
            ne = [self._unpack("<Q")[0] for _ in range(n_dims)]
            ggml_type, offset = self._unpack("<IQ")
            infos.append((name, ne, ggml_type, offset))
        data_start = (self.pos + align - 1) // align * align
        self.tensor_types = {}
        self.tensors = {}
        for name, ne, ggml_type, offset in infos:
            self.tensor_types[name] = ggml_type
            if ggml_type not in _TENSOR_DTYPE:
                continue  # quantised tensors are not needed on the Python side
            dtype = _TENSOR_DTYPE[ggml_type]
            n = int(np.prod(ne))
            arr = np.frombuffer(self.buf, dtype=dtype, count=n, offset=data_start + offset)
            if ggml_type == GGML_BF16:
                arr = bf16_to_f32(arr)
            self.tensors[name] = arr.reshape(list(reversed(ne))).astype(np.float32)

    def _unpack(self, fmt):
        vals = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += struct.calcsize(fmt)
        return vals

    def _read_string(self):
        (n,) = self._unpack("<Q")
        s = self.buf[self.pos:self.pos + n]
        self.pos += n
        return s.decode("utf-8", errors="surrogateescape")

    def _read_value(self, vtype):
        if vtype == STRING:
            return self._read_string()
        if vtype == ARRAY:
            elem_type, n = self._unpack("<IQ")
            return [self._read_value(elem_type) for _ in range(n)]
        return self._unpack(_SCALAR_FMT[vtype])[0]
