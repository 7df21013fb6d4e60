# ShardLift under Nix: a pinned nixpkgs (flake.lock: nixos-25.11 at 8fd9daa3, from PINS.md),
# libtorch-cpu 2.13.0 assembled from the hash-locked wheels (fetchPypi + autoPatchelfHook),
# the canonical Fashion-MNIST resources (fetchurl, pinned), the binaries, the killer-demo
# app, one check per offline-capable test lane, and a development shell.
#
# WHAT HAS AND HAS NOT BEEN BUILT: nothing in this flake has been built or evaluated
# against nixpkgs. The project's machines have no internet access beyond package
# registries and ship Nix 2.8, older than nixpkgs 25.11 needs, so `nix build` and
# `nix flake check` cannot run there. Every .nix file is parse-checked
# (`nix-instantiate --parse`, nix/parse-check) and flake.lock is hand-written from the pin
# in PINS.md. The non-Nix path (ci/setup, ci/test, ci/release-evidence) is the one that
# has been run end to end.
{
  description = "ShardLift: a crash-consistency lab for sharded training state";

  inputs.nixpkgs.url = "github:NixOS/nixpkgs/nixos-25.11";

  outputs = { self, nixpkgs }:
    let
      system = "x86_64-linux";
      pkgs = import nixpkgs { inherit system; };
      libtorch = pkgs.callPackage ./nix/libtorch-cpu.nix { };
      fashionMnist = pkgs.callPackage ./nix/fashion-mnist.nix { };
      shardlift = pkgs.callPackage ./nix/shardlift.nix {
        inherit libtorch fashionMnist;
        src = pkgs.lib.cleanSource self;
      };
      killerDemo = pkgs.writeShellApplication {
        name = "shardlift-killer-demo";
        runtimeInputs = [ shardlift.package ];
        # Both barriers by default; the dataset comes from the pinned store path unless
        # the caller names another --source-directory.
        text = ''
          for argument in "$@"; do
            if [ "$argument" = "--source-directory" ]; then
              exec shardlift killer-demo "$@"
            fi
          done
          exec shardlift killer-demo --source-directory ${fashionMnist} "$@"
        '';
      };
    in
    {
      packages.${system} = {
        default = shardlift.package;
        shardlift = shardlift.package;
        libtorch-cpu = libtorch;
        fashion-mnist = fashionMnist;
        killer-demo = killerDemo;
      };

      apps.${system}.killer-demo = {
        type = "app";
        program = "${killerDemo}/bin/shardlift-killer-demo";
      };

      checks.${system} = shardlift.checks;

      devShells.${system}.default = pkgs.mkShell {
        inputsFrom = [ shardlift.package ];
        packages = [ pkgs.cargo pkgs.rustc pkgs.clippy pkgs.rustfmt pkgs.git pkgs.openssh ];
        LIBTORCH = "${libtorch}/torch";
        OMP_NUM_THREADS = "1";
        SHARDLIFT_DATASET_SOURCE = "${fashionMnist}";
        shellHook = ''
          echo "shardlift dev shell: LIBTORCH=$LIBTORCH; dataset: shardlift dataset fetch --cache-directory DIR --source-directory $SHARDLIFT_DATASET_SOURCE" >&2
        '';
      };
    };
}
