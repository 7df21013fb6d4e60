# The shardlift and pipeline binaries, and one check derivation per offline-capable test
# lane of ci/test (fast, ml, process, slow, with ci/test's test selections) plus the
# pipeline's release tests and the committed-evidence check. Not here: the quality lane
# (ci/quality: rustfmt, clippy, cargo-deny, docs) and the objectstore lane, which needs the
# Garage binary ci/garage installs from crates.io and a three-node cluster on loopback.
#
# NOT BUILT: the project's machines cannot fetch nixpkgs, crates or wheels, and their Nix
# (2.8) is older than nixpkgs 25.11 needs; this file is parse-checked only. What it encodes
# was verified outside Nix on Debian: LIBTORCH pointing at the wheel layout, tch 0.26 building
# its C++ wrapper against it, the build.rs rpath to $LIBTORCH/lib, one torch thread.
{ lib, rustPlatform, libtorch, fashionMnist, src, git, openssh, gzip }:

let
  common = {
    version = "0.1.0";
    inherit src;
    cargoLock.lockFile = ../Cargo.lock;

    # tch-sys compiles its C++ wrapper against these headers and links these libraries;
    # shardlift's build.rs turns the same directory into an rpath of the binary.
    LIBTORCH = "${libtorch}/torch";
    # Determinism: one intra-op thread (the workers also set it through tch).
    OMP_NUM_THREADS = "1";

    buildInputs = [ libtorch ];
    nativeCheckInputs = [ git openssh gzip ];

    # The dataset cache the tests share, filled from the fetchurl'd canonical .gz files
    # (checked by shardlift against the payload pins before they are installed).
    preCheck = ''
      export HOME=$TMPDIR
      export SHARDLIFT_CACHE_DIR=$TMPDIR/shardlift-data
      mkdir -m 0700 -p $SHARDLIFT_CACHE_DIR
      cargo run --offline --quiet --bin shardlift -- dataset fetch \
        --cache-directory $SHARDLIFT_CACHE_DIR --source-directory ${fashionMnist}
    '';
  };

  lane = name: tests: rustPlatform.buildRustPackage (common // {
    pname = "shardlift-check-${name}";
    # The lane's commands, as ci/test runs them (cargo test builds what it needs).
    dontCargoBuild = true;
    checkPhase = ''
      runHook preCheck
      ${tests}
      runHook postCheck
    '';
    installPhase = "touch $out";
  });
in
{
  package = rustPlatform.buildRustPackage (common // {
    pname = "shardlift";
    # Two cargo invocations: built together, cargo would unify features and link the
    # pipeline against libtorch as well (without the rpath only shardlift's build.rs adds).
    buildPhase = ''
      runHook preBuild
      cargo build --offline --locked --release -p shardlift
      cargo build --offline --locked --release -p pipeline
      runHook postBuild
    '';
    installPhase = ''
      runHook preInstall
      for binary in shardlift pipeline; do
        install -Dm755 "$(find target -path "*/release/$binary" -type f | head -n 1)" "$out/bin/$binary"
      done
      runHook postInstall
    '';
    # The lanes run as separate checks (below).
    doCheck = false;
    meta = {
      description = "ShardLift: a crash-consistency lab for sharded training state";
      license = lib.licenses.asl20;
      mainProgram = "shardlift";
      platforms = [ "x86_64-linux" ];
    };
  });

  checks = {
    fast = lane "fast" ''
      cargo test --offline --no-default-features --workspace --lib --bins \
        --test 'fast_*' --test 'dataset_*' --test 'store_*' --test 'receipt_*' \
        --test 'sshsig_*' -- --skip decoders_never_panic_heavy
    '';
    ml = lane "ml" ''
      cargo test --offline --lib -- engine:: orchestrate::
      cargo test --offline --test 'ml_*'
    '';
    process = lane "process" ''
      cargo test --offline --test 'process_*' -- --skip crash_matrix_passes \
        --skip every_mutant_run_alone
    '';
    slow = lane "slow" ''
      cargo test --offline --test 'slow_*' -- --include-ignored
      cargo test --offline --test process_store --test store_fuzz -- --ignored
    '';
    # The release-evidence tests build their own throwaway git repositories (git, ssh-keygen).
    release = lane "release" ''
      cargo build --offline -p shardlift
      cargo test --offline -p pipeline --test 'release_*'
    '';
    # The committed evidence still verifies (the staleness report needs .git, which a
    # Nix source has not: ci/check-evidence gives it outside Nix).
    evidence = lane "evidence" ''
      cargo build --offline -p pipeline
      found=0
      for sums in evidence/*/SHA256SUMS; do
        [ -f "$sums" ] || continue
        found=1
        ./target/debug/pipeline verify-release --dir "$(dirname "$sums")"
      done
      [ "$found" = 1 ]
    '';
  };
}
