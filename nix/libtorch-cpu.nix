# libtorch 2.13.0 for CPU execution, assembled from the hash-locked PyPI wheels of
# ci/libtorch.lock (the same three files ci/bootstrap installs; hashes from PINS.md).
#
# NOT BUILT: no machine of this project can reach a Nix binary cache or the wheel host,
# and their Nix (2.8) is older than nixpkgs 25.11 needs. This file is parse-checked only
# (nix-instantiate --parse). Expect to adjust autoPatchelfIgnoreMissingDeps on a first real
# build: the list below is derived from readelf on the installed wheels, not from a Nix run.
#
# Layout of $out (as the wheels lay it out, so LIBTORCH=$out/torch):
#   torch/{include,share,version.py}   headers and CMake files tch-sys compiles against
#   torch/lib/{libtorch_cpu.so,libc10.so,libgomp.so.1,libtorch.so}
#   nvidia/cu13/lib/{libcudart.so.13,libcupti.so.13,...}   libtorch_cpu.so links these two
# The CUDA-only libraries (libtorch_cuda*.so, libc10_cuda.so, nvrtc, nvshmem, python
# bindings) are dropped: tch-sys then links the CPU build only, and with as-needed linking
# the shardlift binary needs only libtorch_cpu.so and libc10.so (measured on Debian).
{ lib, stdenv, fetchPypi, unzip, autoPatchelfHook, zlib }:

let
  wheel = args: fetchPypi ({ format = "wheel"; } // args);

  torch = wheel {
    pname = "torch";
    version = "2.13.0";
    dist = "cp311";
    python = "cp311";
    abi = "cp311";
    platform = "manylinux_2_28_x86_64";
    # 60fcdcb2f3876e21146cb4524ef06397d727ca9ad5f020818547e25075fe3cb7
    hash = "sha256-YPzcsvOHbiEUbLRSTvBjl9cnyprV8CCBhUfiUHX+PLc=";
  };

  cudaRuntime = wheel {
    pname = "nvidia_cuda_runtime";
    version = "13.0.96";
    dist = "py3";
    python = "py3";
    abi = "none";
    platform = "manylinux2014_x86_64.manylinux_2_17_x86_64";
    # 7f82250d7782aa23b6cfe765ecc7db554bd3c2870c43f3d1821f1d18aebf0548
    hash = "sha256-f4IlDXeCqiO2z+dl7MfbVUvTwocMQ/PRgh8dGK6/BUg=";
  };

  cudaCupti = wheel {
    pname = "nvidia_cuda_cupti";
    version = "13.0.85";
    dist = "py3";
    python = "py3";
    abi = "none";
    platform = "manylinux_2_25_x86_64";
    # 4eb01c08e859bf924d222250d2e8f8b8ff6d3db4721288cf35d14252a4d933c8
    hash = "sha256-TrAcCOhZv5JNIiJQ0uj4uP9tPbRyEojPNdFCUqTZM8g=";
  };
in
stdenv.mkDerivation {
  pname = "libtorch-cpu";
  version = "2.13.0";

  srcs = [ torch cudaRuntime cudaCupti ];
  dontUnpack = true;
  dontConfigure = true;
  dontBuild = true;

  nativeBuildInputs = [ unzip autoPatchelfHook ];
  # libstdc++ and libgcc_s for libc10/libtorch_cpu; zlib for what links it.
  buildInputs = [ stdenv.cc.cc.lib zlib ];

  # libtorch.so names libtorch_cuda.so, which is dropped (tch links the CPU libraries;
  # libtorch.so stays only because tch-sys asks the linker for -ltorch). libcupti and the
  # NVIDIA profiling helpers may name the driver library, which exists only on GPU hosts.
  autoPatchelfIgnoreMissingDeps = [ "libtorch_cuda.so" "libcuda.so.1" ];

  installPhase = ''
    runHook preInstall
    mkdir -p $out
    unzip -q ${torch} 'torch/include/*' 'torch/share/*' 'torch/lib/*' 'torch/version.py' -d $out
    unzip -q ${cudaRuntime} 'nvidia/*' -d $out
    unzip -q ${cudaCupti} 'nvidia/*' -d $out
    # CPU execution only: drop CUDA-only and Python-only libraries and static archives.
    rm -f $out/torch/lib/libtorch_cuda*.so $out/torch/lib/libc10_cuda.so \
          $out/torch/lib/libcaffe2_nvrtc.so $out/torch/lib/libtorch_nvshmem.so \
          $out/torch/lib/libtorch_python.so $out/torch/lib/libtorch_global_deps.so
    rm -rf $out/torch/lib/libshm $out/torch/lib/libshm_windows $out/torch/lib/libshm.so
    find $out/nvidia -name '*.a' -delete
    grep -q "^__version__ = '2.13.0" $out/torch/version.py
    runHook postInstall
  '';

  meta = {
    description = "libtorch 2.13.0 (CPU use) from the pinned torch and CUDA runtime wheels";
    platforms = [ "x86_64-linux" ];
    sourceProvenance = [ lib.sourceTypes.binaryNativeCode ];
  };
}
