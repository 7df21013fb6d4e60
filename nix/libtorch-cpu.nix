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
  # wheel PNAME VERSION TAG PLATFORM HASH: a pinned PyPI wheel; TAG is its python tag
  # (and ABI tag, "none" for py3). The hex SHA-256 of each is in ci/libtorch.lock.
  wheel = pname: version: tag: platform: hash: fetchPypi {
    inherit pname version platform hash;
    format = "wheel";
    dist = tag;
    python = tag;
    abi = if tag == "py3" then "none" else tag;
  };

  torch = wheel "torch" "2.13.0" "cp311" "manylinux_2_28_x86_64"
    "sha256-YPzcsvOHbiEUbLRSTvBjl9cnyprV8CCBhUfiUHX+PLc=";
  cudaRuntime = wheel "nvidia_cuda_runtime" "13.0.96" "py3"
    "manylinux2014_x86_64.manylinux_2_17_x86_64"
    "sha256-f4IlDXeCqiO2z+dl7MfbVUvTwocMQ/PRgh8dGK6/BUg=";
  cudaCupti = wheel "nvidia_cuda_cupti" "13.0.85" "py3" "manylinux_2_25_x86_64"
    "sha256-TrAcCOhZv5JNIiJQ0uj4uP9tPbRyEojPNdFCUqTZM8g=";
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
