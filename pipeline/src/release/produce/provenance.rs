//! The Statement of release evidence: the bundle files as subjects, every other emitted
//! file as a byproduct, and the source, libtorch wheels, dataset and runtime sources as
//! resolved dependencies.
use serde_json::json;
use shardlift::core::digest::Digest;
use shardlift::dataset::FASHION_MNIST;
use shardlift::evidence::kernel_path;

use super::{Emitted, SourceFacts, SEED};
use crate::intoto::{ResourceDescriptor, STATEMENT_TYPE};
use crate::release::pins::{self, BARRIERS, LIBTORCH_WHEELS};
use crate::release::statement::{
    BuildDefinition, BuildIdentity, Builder, ExternalParameters, InternalParameters, LoadedLibrary,
    Provenance, RunDetails, Statement, BUILDER_ID, BUILD_TYPE, PREDICATE_TYPE,
};

/// The binaries that ran, by digest, and the libtorch they loaded.
pub(super) struct Binaries {
    pub shardlift_sha256: Digest,
    pub pipeline_sha256: Digest,
    pub loaded_libraries: Vec<LoadedLibrary>,
}

pub(super) fn build_statement(
    source: &SourceFacts,
    emitted: &[Emitted],
    binaries: Binaries,
) -> Statement {
    let (subject, byproducts) = subject_and_byproducts(emitted);
    Statement {
        statement_type: STATEMENT_TYPE.into(),
        subject,
        predicate_type: PREDICATE_TYPE.into(),
        predicate: Provenance {
            build_definition: BuildDefinition {
                build_type: BUILD_TYPE.into(),
                external_parameters: ExternalParameters {
                    barriers: BARRIERS.iter().map(|s| s.to_string()).collect(),
                    seed: SEED,
                    source_revision: source.commit.clone(),
                },
                internal_parameters: InternalParameters {
                    runtime_source_rule: source.inputs.rule.clone(),
                    ignored_files: source.ignored.clone(),
                    build_identity: BuildIdentity {
                        shardlift_sha256: binaries.shardlift_sha256.to_hex(),
                        pipeline_sha256: binaries.pipeline_sha256.to_hex(),
                        pipeline_version: env!("CARGO_PKG_VERSION").into(),
                        tch_version: pins::TCH_VERSION.into(),
                        libtorch_version: pins::LIBTORCH_VERSION.into(),
                        loaded_libraries: binaries.loaded_libraries,
                        cpu_kernel_path: Some(kernel_path::this_machine()),
                    },
                    nonclaims: pins::NONCLAIMS.iter().map(|s| s.to_string()).collect(),
                },
                resolved_dependencies: resolved_dependencies(source),
            },
            run_details: RunDetails {
                builder: Builder {
                    id: BUILDER_ID.into(),
                    version: [("pipeline".to_owned(), env!("CARGO_PKG_VERSION").to_owned())]
                        .into_iter()
                        .collect(),
                },
                byproducts,
            },
        },
    }
}

/// The bundle files (subjects) and every other emitted file (byproducts), each sorted by
/// name, with their SHA-256.
fn subject_and_byproducts(
    emitted: &[Emitted],
) -> (Vec<ResourceDescriptor>, Vec<ResourceDescriptor>) {
    let mut subject = Vec::new();
    let mut byproducts = Vec::new();
    for (name, bytes) in emitted {
        let descriptor =
            ResourceDescriptor::named(name.clone(), &[("sha256", Digest::of(bytes).to_hex())]);
        if name.starts_with("bundles/") {
            subject.push(descriptor);
        } else {
            byproducts.push(descriptor);
        }
    }
    subject.sort_by(|a, b| a.name.cmp(&b.name));
    byproducts.sort_by(|a, b| a.name.cmp(&b.name));
    (subject, byproducts)
}

/// The source revision, the pinned libtorch wheels, the dataset files and the runtime
/// sources, in that order.
fn resolved_dependencies(source: &SourceFacts) -> Vec<ResourceDescriptor> {
    let mut dependencies = vec![ResourceDescriptor::named(
        "source",
        &[
            ("gitCommit", source.commit.clone()),
            ("gitTree", source.tree.clone()),
        ],
    )];
    dependencies.extend(libtorch_wheels());
    dependencies.extend(dataset_files());
    dependencies.extend(source.inputs.descriptors());
    dependencies
}

fn libtorch_wheels() -> impl Iterator<Item = ResourceDescriptor> {
    LIBTORCH_WHEELS.iter().map(|wheel| {
        ResourceDescriptor::named(wheel.file_name, &[("sha256", wheel.sha256.to_owned())])
            .with_uri(format!("pkg:pypi/{}@{}", wheel.package, wheel.version))
    })
}

fn dataset_files() -> impl Iterator<Item = ResourceDescriptor> {
    FASHION_MNIST.resources.iter().map(|pin| {
        let gz = format!("{}.gz", pin.name);
        ResourceDescriptor::named(
            format!("fashion-mnist/{gz}"),
            &[("sha256", pin.gzip.sha256.to_hex())],
        )
        .with_uri(format!("{}/{gz}", pins::FASHION_MNIST_UPSTREAM))
        .annotate("bytes", json!(pin.gzip.bytes))
        .annotate("payloadName", json!(pin.name))
        .annotate("payloadBytes", json!(pin.payload.bytes))
        .annotate("payloadSha256", json!(pin.payload.sha256.to_hex()))
    })
}
