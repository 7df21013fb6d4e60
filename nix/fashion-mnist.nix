# The four canonical Fashion-MNIST .gz resources, fetched from the project's upstream
# repository with the SHA-256 pins of PINS.md (src/dataset/pins.rs holds the same values),
# gathered into one directory that `shardlift ... --source-directory` accepts.
#
# NOT BUILT here (no internet on the project's machines); parse-checked only.
{ lib, fetchurl, linkFarm }:

let
  upstream = "https://github.com/zalandoresearch/fashion-mnist/raw/master/data/fashion";
  resource = name: hash: {
    name = "${name}.gz";
    path = fetchurl {
      url = "${upstream}/${name}.gz";
      inherit hash;
    };
  };
in
linkFarm "fashion-mnist" [
  # 3aede38d61863908ad78613f6a32ed271626dd12800ba2636569512369268a84 (26421880 bytes)
  (resource "train-images-idx3-ubyte" "sha256-Ou3jjWGGOQiteGE/ajLtJxYm3RKAC6JjZWlRI2kmioQ=")
  # a04f17134ac03560a47e3764e11b92fc97de4d1bfaf8ba1a3aa29af54cc90845 (29515 bytes)
  (resource "train-labels-idx1-ubyte" "sha256-oE8XE0rANWCkfjdk4RuS/JfeTRv6+LoaOqKa9UzJCEU=")
  # 346e55b948d973a97e58d2351dde16a484bd415d4595297633bb08f03db6a073 (4422102 bytes)
  (resource "t10k-images-idx3-ubyte" "sha256-NG5VuUjZc6l+WNI1Hd4WpIS9QV1FlSl2M7sI8D22oHM=")
  # 67da17c76eaffca5446c3361aaab5c3cd6d1c2608764d35dfb1850b086bf8dd5 (5148 bytes)
  (resource "t10k-labels-idx1-ubyte" "sha256-Z9oXx26v/KVEbDNhqqtcPNbRwmCHZNNd+xhQsIa/jdU=")
]
