"""ctypes declarations of ge_v2_api.h and the library loader."""
from __future__ import annotations

import ctypes
import os
import struct
from pathlib import Path

API_VERSION = 2  # the GE2_API_VERSION this binding was written for

OK = 0
STATUS_NAMES = {
    0: "GE2_OK", 1: "GE2_ERROR_INVALID_ARGUMENT", 2: "GE2_ERROR_SHAPE_MISMATCH",
    3: "GE2_ERROR_UNSUPPORTED", 4: "GE2_ERROR_NO_DEVICE", 5: "GE2_ERROR_CUDA",
    6: "GE2_ERROR_CUBLAS", 7: "GE2_ERROR_OUT_OF_MEMORY", 8: "GE2_ERROR_TUNEDB",
    9: "GE2_ERROR_VERSION_MISMATCH", 10: "GE2_ERROR_INTERNAL",
}
DTYPE_F16, DTYPE_BF16, DTYPE_F32 = 1, 2, 3
DTYPE_F8_E4M3 = 4  # storage only: a quantized constant's data (since 2.7)
DEVICES = {"auto": 0, "cuda": 1, "cpu": 2}
TUNE_MODES = {"off": 0, "cached": 1, "tune": 2}
ACTIVATIONS = {None: 0, "none": 0, "relu": 1, "gelu": 2, "gelu_erf": 2, "gelu_tanh": 3, "silu": 4,
               "quick_gelu": 5}  # 5 since 2.6
ELEMENTWISE_ADD, ELEMENTWISE_MUL = 1, 2
NO_VALUE = -1


class TensorDesc(ctypes.Structure):
    _fields_ = [("dtype", ctypes.c_int), ("rank", ctypes.c_int32),
                ("shape", ctypes.c_int64 * 3), ("strides", ctypes.c_int64 * 3)]


# void (*)(void* user_data, ge2_log_level_t level, const char* message)
LOG_CALLBACK = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p)
LOG_LEVELS = {"default": 0, "off": 1, "error": 2, "warning": 3, "info": 4}


class ContextOptions(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_uint32), ("device", ctypes.c_int), ("device_ordinal", ctypes.c_int),
                ("tune_mode", ctypes.c_int), ("tunedb_path", ctypes.c_char_p),
                ("one_shot_cache_size", ctypes.c_uint32),
                ("log_callback", LOG_CALLBACK), ("log_user_data", ctypes.c_void_p), ("log_level", ctypes.c_int)]


class GemmAttrs(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_uint32), ("trans_a", ctypes.c_int), ("trans_b", ctypes.c_int),
                ("alpha", ctypes.c_float), ("beta", ctypes.c_float)]


class CompileOptions(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_uint32), ("fuse", ctypes.c_int), ("allow_tf32", ctypes.c_int),
                ("allow_staging", ctypes.c_int), ("force_kernel", ctypes.c_char_p), ("graph_replay", ctypes.c_int),
                ("allow_fp8", ctypes.c_int), ("fp8_max_error", ctypes.c_float)]


class IoInfo(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("is_output", ctypes.c_int), ("desc", TensorDesc),
                ("required_bytes", ctypes.c_size_t)]


class Binding(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("data", ctypes.c_void_p)]


# One Binding as struct packs it: the name's address, then the data's.
PACKED_BINDING = "PP"
assert ctypes.sizeof(Binding) == struct.calcsize(PACKED_BINDING) and Binding.data.offset == struct.calcsize("P")


def name_address(encoded: bytes) -> int:
    """The address of `encoded`'s bytes, valid while the caller holds `encoded`."""
    return ctypes.cast(ctypes.c_char_p(encoded), ctypes.c_void_p).value


class BindingPacker:
    """Packs an array of ge2_binding_t for the *_packed functions: the names fixed (their
    addresses, in order), the data pointers given per call."""
    __slots__ = ("_template", "_pack")

    def __init__(self, name_addresses):
        self._template = [value for address in name_addresses for value in (address, 0)]
        self._pack = struct.Struct(PACKED_BINDING * len(name_addresses)).pack

    def __call__(self, pointers) -> bytes:
        values = self._template.copy()
        values[1::2] = pointers
        return self._pack(*values)


class GemmParams(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_uint32), ("m", ctypes.c_int64), ("n", ctypes.c_int64),
                ("k", ctypes.c_int64), ("batch", ctypes.c_int64), ("trans_a", ctypes.c_int),
                ("trans_b", ctypes.c_int), ("lda", ctypes.c_int64), ("ldb", ctypes.c_int64),
                ("ldd", ctypes.c_int64), ("stride_a", ctypes.c_int64), ("stride_b", ctypes.c_int64),
                ("stride_d", ctypes.c_int64), ("dtype", ctypes.c_int), ("activation", ctypes.c_int),
                ("has_bias", ctypes.c_int), ("alpha", ctypes.c_float)]


def _candidates():
    env = os.environ.get("GE2_LIBRARY")
    if env:
        yield Path(env)
        return
    here = Path(__file__).resolve().parent
    yield here / "libge2.so.2"  # inside the wheel
    yield here / "libge2.so"
    root = here.parents[2]  # bindings/python/ge2 -> repository root
    for build in sorted(root.glob("build*")):
        yield build / "src" / "libge2.so"
    yield Path("libge2.so")  # the system loader's search path


# The CUDA libraries a CUDA build of libge2 needs, by soname. Without a CUDA toolkit on the
# loader's path they may come from NVIDIA's wheels (nvidia-cuda-runtime, nvidia-cublas), which
# install them under site-packages/nvidia/cu13/lib.
CUDA_SONAMES = ("libcudart.so.13", "libcublasLt.so.13")
WHEEL_LIBRARIES: list[str] = []  # what load_library preloaded from those wheels, if anything


def _wheel_library_dirs():
    """The nvidia/cu13/lib folders of the NVIDIA wheels on sys.path (a namespace package)."""
    import importlib.util

    spec = importlib.util.find_spec("nvidia")
    for location in (spec.submodule_search_locations or []) if spec else []:
        folder = Path(location) / "cu13" / "lib"
        if folder.is_dir():
            yield folder


def _preload_wheel_libraries() -> list[str]:
    """Loads the CUDA runtime and cuBLASLt from NVIDIA's wheels, globally, so that libge2's
    dependencies on their sonames resolve to them (as PyTorch does). Returns the paths loaded."""
    loaded = []
    for soname in CUDA_SONAMES:
        for folder in _wheel_library_dirs():
            if (folder / soname).is_file():
                ctypes.CDLL(str(folder / soname), mode=ctypes.RTLD_GLOBAL)
                loaded.append(str(folder / soname))
                break
    return loaded


def load_library() -> ctypes.CDLL:
    """libge2 from GE2_LIBRARY, the package folder (a wheel), a build folder of the repository or
    the system's search path. A CUDA build whose CUDA libraries the loader cannot find (no
    toolkit) takes them from NVIDIA's runtime wheels where those are installed."""
    errors = []
    for path in _candidates():
        try:
            lib = ctypes.CDLL(str(path))
            break
        except OSError as error:
            missing = any(soname in str(error) for soname in CUDA_SONAMES)
            if missing and not WHEEL_LIBRARIES:
                WHEEL_LIBRARIES.extend(_preload_wheel_libraries())
                if WHEEL_LIBRARIES:
                    try:
                        lib = ctypes.CDLL(str(path))
                        break
                    except OSError as retry:
                        error = retry
            errors.append(f"{path}: {error}")
    else:
        hint = ""
        if any(soname in e for e in errors for soname in CUDA_SONAMES):
            hint = ("\nThis is a CUDA build: install a CUDA 13 toolkit, or NVIDIA's runtime wheels "
                    "(pip install nvidia-cuda-runtime nvidia-cublas)"
                    + (f"; preloaded from wheels: {', '.join(WHEEL_LIBRARIES)}" if WHEEL_LIBRARIES else "")
                    + ".")
        raise ImportError("cannot load libge2.so; set GE2_LIBRARY. Tried:\n  " + "\n  ".join(errors) + hint)
    _declare(lib)
    return lib


def _declare(lib: ctypes.CDLL) -> None:
    P, I, S = ctypes.c_void_p, ctypes.c_int, ctypes.c_int  # S: ge2_status_t
    pp = ctypes.POINTER(ctypes.c_void_p)
    value_p = ctypes.POINTER(ctypes.c_int32)
    table = {
        "ge2_status_string": (ctypes.c_char_p, [I]),
        "ge2_last_error": (ctypes.c_char_p, []),
        "ge2_get_api_version": (I, []),
        "ge2_get_version_string": (ctypes.c_char_p, []),
        "ge2_context_options_init_sized": (S, [ctypes.POINTER(ContextOptions), ctypes.c_size_t]),  # with this module's struct size
        "ge2_context_create": (S, [I, ctypes.POINTER(ContextOptions), pp]),
        "ge2_context_destroy": (None, [P]),
        "ge2_context_get_device_kind": (S, [P, ctypes.POINTER(ctypes.c_int)]),
        "ge2_context_describe": (S, [P, ctypes.POINTER(ctypes.c_char_p)]),
        "ge2_graph_create": (S, [pp]),
        "ge2_graph_destroy": (None, [P]),
        "ge2_graph_add_input": (S, [P, ctypes.c_char_p, ctypes.POINTER(TensorDesc), value_p]),
        "ge2_graph_add_dynamic_input": (S, [P, ctypes.c_char_p, ctypes.POINTER(TensorDesc), value_p]),
        "ge2_gemm_attrs_init_sized": (S, [ctypes.POINTER(GemmAttrs), ctypes.c_size_t]),  # with this module's struct size
        "ge2_graph_add_gemm": (S, [P, ctypes.c_int32, ctypes.c_int32, ctypes.c_int32, ctypes.POINTER(GemmAttrs), value_p]),
        "ge2_graph_add_bias": (S, [P, ctypes.c_int32, ctypes.c_int32, value_p]),
        "ge2_graph_add_activation": (S, [P, ctypes.c_int32, I, value_p]),
        "ge2_graph_add_gemm_bias_act": (S, [P, ctypes.c_int32, ctypes.c_int32, ctypes.c_int32, ctypes.POINTER(GemmAttrs), I, value_p]),
        "ge2_graph_add_elementwise": (S, [P, I, ctypes.c_int32, ctypes.c_int32, value_p]),
        "ge2_graph_add_constant": (S, [P, ctypes.c_char_p, ctypes.POINTER(TensorDesc), P, value_p]),
        "ge2_graph_add_quantized_constant": (S, [P, ctypes.c_char_p, ctypes.POINTER(TensorDesc), ctypes.c_int, P,
                                                 ctypes.POINTER(ctypes.c_float), ctypes.c_int64, ctypes.c_int32,
                                                 value_p]),
        "ge2_graph_add_block_quantized_constant": (S, [P, ctypes.c_char_p, ctypes.POINTER(TensorDesc), ctypes.c_int,
                                                       P, ctypes.POINTER(ctypes.c_float), ctypes.c_int64,
                                                       ctypes.c_int64, ctypes.c_int64, value_p]),
        "ge2_graph_mark_output": (S, [P, ctypes.c_int32, ctypes.c_char_p, ctypes.POINTER(TensorDesc)]),
        "ge2_graph_get_desc": (S, [P, ctypes.c_int32, ctypes.POINTER(TensorDesc)]),
        "ge2_compile_options_init_sized": (S, [ctypes.POINTER(CompileOptions), ctypes.c_size_t]),  # with this module's struct size
        "ge2_plan_compile": (S, [P, P, ctypes.POINTER(CompileOptions), pp]),
        "ge2_plan_destroy": (None, [P]),
        "ge2_plan_describe": (S, [P, ctypes.POINTER(ctypes.c_char_p)]),
        "ge2_plan_io_count": (S, [P, ctypes.POINTER(ctypes.c_size_t)]),
        "ge2_plan_io_info": (S, [P, ctypes.c_size_t, ctypes.POINTER(IoInfo)]),
        "ge2_plan_execute": (S, [P, ctypes.POINTER(Binding), ctypes.c_size_t, P]),
        "ge2_plan_get_max_extent": (S, [P, ctypes.POINTER(ctypes.c_int64)]),
        "ge2_plan_io_is_dynamic": (S, [P, ctypes.c_size_t, ctypes.POINTER(ctypes.c_int)]),
        "ge2_plan_execute_dynamic": (S, [P, ctypes.c_int64, ctypes.POINTER(Binding), ctypes.c_size_t, P]),
        "ge2_gemm_params_init_sized": (S, [ctypes.POINTER(GemmParams), ctypes.c_size_t]),  # with this module's struct size
        "ge2_gemm_bias_act": (S, [P, ctypes.POINTER(GemmParams), P, P, P, P, P]),
    }
    for name, (restype, argtypes) in table.items():
        function = getattr(lib, name)
        function.restype = restype
        function.argtypes = argtypes
    # Plan.execute's repeated call passes its bindings as one buffer packed with struct (PACKED_BINDING
    # per binding, ge2_binding_t's layout): filling ctypes structures cost more than the call itself.
    packed = {"ge2_plan_execute": [P, ctypes.c_char_p, ctypes.c_size_t, P],
              "ge2_plan_execute_dynamic": [P, ctypes.c_int64, ctypes.c_char_p, ctypes.c_size_t, P]}
    for name, argtypes in packed.items():
        function = lib[name]  # a new function object: the attribute keeps its Binding prototype
        function.restype = S
        function.argtypes = argtypes
        setattr(lib, name + "_packed", function)
