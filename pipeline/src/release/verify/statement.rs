//! The Statement checks of `verify-release`: `release-evidence.json` decodes, is canonical,
//! and agrees with the files, the pins and the bundles.
use std::collections::BTreeMap;

use shardlift::core::digest::Digest;
use shardlift::dataset::FASHION_MNIST;
use shardlift::evidence::bundle::{AuditRecord, BundleSummary};
use shardlift::evidence::kernel_path;

use super::{inconsistent, is_hex, require};
use crate::intoto::{ResourceDescriptor, STATEMENT_TYPE};
use crate::release::error::ReleaseError;
use crate::release::pins::{self, BARRIERS, LIBTORCH_WHEELS};
use crate::release::statement::{
    BuildDefinition, Statement, BUILDER_ID, BUILD_TYPE, PREDICATE_TYPE, STATEMENT_CAP,
};

/// Each barrier's verified bundle summary and its audit record.
pub(super) type Bundles<'a> = BTreeMap<&'a str, (BundleSummary, AuditRecord)>;

/// The Statement errors all name it.
const NAME: &str = pins::STATEMENT;

pub(super) fn check_statement(
    files: &BTreeMap<String, Vec<u8>>,
    bundles: &Bundles<'_>,
) -> Result<Statement, ReleaseError> {
    let statement = decode_statement(&files[NAME])?;
    check_subjects_and_byproducts(&statement, files)?;
    let definition = &statement.predicate.build_definition;
    let commit = check_source(definition)?;
    check_pinned_dependencies(&definition.resolved_dependencies)?;
    check_runtime_sources(definition)?;
    check_build_identity(definition)?;
    check_bundle_bindings(bundles, &commit)?;
    Ok(statement)
}

/// The Statement decodes, is canonical, and is an in-toto Statement v1 with this
/// pipeline's SLSA provenance.
fn decode_statement(bytes: &[u8]) -> Result<Statement, ReleaseError> {
    let name = NAME;
    if bytes.len() as u64 > STATEMENT_CAP {
        return Err(inconsistent(name, "too large"));
    }
    let statement: Statement =
        serde_json::from_slice(bytes).map_err(|e| ReleaseError::Malformed {
            name: name.into(),
            message: e.to_string(),
        })?;
    let canonical =
        serde_json_canonicalizer::to_vec(&statement).map_err(|e| ReleaseError::Malformed {
            name: name.into(),
            message: e.to_string(),
        })?;
    if canonical != bytes {
        return Err(ReleaseError::NonCanonical { name: name.into() });
    }
    require(
        statement.statement_type == STATEMENT_TYPE && statement.predicate_type == PREDICATE_TYPE,
        name,
        || "not an in-toto Statement v1 with a SLSA provenance v1 predicate".into(),
    )?;
    let definition = &statement.predicate.build_definition;
    require(
        definition.build_type == BUILD_TYPE
            && statement.predicate.run_details.builder.id == BUILDER_ID,
        name,
        || "unknown buildType or builder".into(),
    )?;

    Ok(statement)
}

fn find<'a>(dependencies: &'a [ResourceDescriptor], name: &str) -> Option<&'a ResourceDescriptor> {
    dependencies
        .iter()
        .find(|d| d.name.as_deref() == Some(name))
}

/// Subjects: exactly the bundle files; byproducts: every other file but the Statement.
fn check_subjects_and_byproducts(
    statement: &Statement,
    files: &BTreeMap<String, Vec<u8>>,
) -> Result<(), ReleaseError> {
    let name = NAME;
    // Subjects: exactly the bundle files, with their SHA-256.
    let mut expected_subjects = Vec::new();
    let mut expected_byproducts = Vec::new();
    for file in pins::expected_files(files.contains_key(pins::RECEIPT)) {
        let descriptor = ResourceDescriptor::named(
            file.clone(),
            &[("sha256", Digest::of(&files[&file]).to_hex())],
        );
        if file.starts_with("bundles/") {
            expected_subjects.push(descriptor);
        } else if file != pins::STATEMENT {
            expected_byproducts.push(descriptor);
        }
    }
    // A subject or byproduct whose digest differs names the file it describes.
    for (kind, listed, expected) in [
        ("subject", &statement.subject, &expected_subjects),
        (
            "byproduct",
            &statement.predicate.run_details.byproducts,
            &expected_byproducts,
        ),
    ] {
        let names = |list: &[ResourceDescriptor]| -> Vec<Option<String>> {
            list.iter().map(|d| d.name.clone()).collect()
        };
        require(names(listed) == names(expected), name, || {
            format!("its {kind}s are not exactly {:?}", names(expected))
        })?;
        for (found, wanted) in listed.iter().zip(expected.iter()) {
            let file = wanted.name.as_deref().unwrap_or_default();
            require(found == wanted, file, || {
                format!("its SHA-256 is not the {kind} digest release-evidence.json binds")
            })?;
        }
    }

    Ok(())
}

/// The source (first dependency) binds a commit and tree, and the external parameters
/// name that commit, both barriers and seed 0; returns the commit.
fn check_source(definition: &BuildDefinition) -> Result<String, ReleaseError> {
    let name = NAME;
    // Dependencies: the source first, then the wheels, the dataset and runtime sources.
    let dependencies = &definition.resolved_dependencies;
    let source = dependencies
        .first()
        .filter(|d| d.name.as_deref() == Some("source"))
        .ok_or_else(|| inconsistent(name, "the first resolved dependency is not the source"))?;
    let commit = source
        .digest
        .get("gitCommit")
        .map(String::as_str)
        .unwrap_or("");
    let tree = source
        .digest
        .get("gitTree")
        .map(String::as_str)
        .unwrap_or("");
    require(
        is_hex(commit, 40) && is_hex(tree, 40) && source.digest.len() == 2,
        name,
        || "the source does not bind a 40-hex gitCommit and gitTree".into(),
    )?;
    require(
        definition.external_parameters.source_revision == commit,
        name,
        || "externalParameters.sourceRevision differs from gitCommit".into(),
    )?;
    require(
        definition.external_parameters.barriers == BARRIERS.map(String::from)
            && definition.external_parameters.seed == 0,
        name,
        || "externalParameters name other barriers or another seed".into(),
    )?;
    Ok(commit.to_owned())
}

/// The libtorch wheels and the dataset files are bound to their pins.
fn check_pinned_dependencies(dependencies: &[ResourceDescriptor]) -> Result<(), ReleaseError> {
    let name = NAME;
    let find = |dependency: &str| find(dependencies, dependency);
    for wheel in LIBTORCH_WHEELS {
        let found = find(wheel.file_name);
        require(
            found.is_some_and(|d| {
                d.digest.get("sha256").map(String::as_str) == Some(wheel.sha256)
                    && d.uri.as_deref()
                        == Some(&format!("pkg:pypi/{}@{}", wheel.package, wheel.version))
            }),
            name,
            || {
                format!(
                    "the wheel {} is not bound to its pinned SHA-256",
                    wheel.file_name
                )
            },
        )?;
    }
    for pin in FASHION_MNIST.resources {
        let dependency = format!("fashion-mnist/{}.gz", pin.name);
        let found = find(&dependency);
        require(
            found.is_some_and(|d| {
                d.digest.get("sha256") == Some(&pin.gzip.sha256.to_hex())
                    && d.annotation("payloadSha256")
                        == Some(&serde_json::Value::String(pin.payload.sha256.to_hex()))
            }),
            name,
            || format!("{dependency} is not bound to its pins"),
        )?;
    }
    Ok(())
}

/// Every runtime source is selected by the recorded rule and bound by blob id; the lock
/// files also by SHA-256.
fn check_runtime_sources(definition: &BuildDefinition) -> Result<(), ReleaseError> {
    let name = NAME;
    let dependencies = &definition.resolved_dependencies;
    let find = |dependency: &str| find(dependencies, dependency);
    let rule = &definition.internal_parameters.runtime_source_rule;
    require(!rule.is_empty(), name, || {
        "the runtime-source rule is empty".into()
    })?;
    let mut runtime = 0usize;
    for dependency in dependencies {
        if dependency.annotation("runtimeSource") != Some(&serde_json::Value::Bool(true)) {
            continue;
        }
        runtime += 1;
        let path = dependency.name.as_deref().unwrap_or("");
        require(
            pins::rule_selects(rule, path)
                && dependency
                    .digest
                    .get("gitBlob")
                    .is_some_and(|b| is_hex(b, 40)),
            name,
            || format!("runtime source {path:?} is not selected by the rule or has no gitBlob"),
        )?;
    }
    require(runtime > 0, name, || {
        "no runtime sources are recorded".into()
    })?;
    for lock in ["Cargo.lock", "ci/libtorch.lock"] {
        require(
            find(lock).is_some_and(|d| {
                d.digest.get("sha256").is_some_and(|s| is_hex(s, 64))
                    && d.digest.get("gitBlob").is_some_and(|b| is_hex(b, 40))
            }),
            name,
            || format!("{lock} is not bound by sha256 and gitBlob"),
        )?;
    }

    Ok(())
}

/// The binaries' digests, the pinned versions, the core libtorch libraries and the
/// nonclaims.
fn check_build_identity(definition: &BuildDefinition) -> Result<(), ReleaseError> {
    let name = NAME;
    let identity = &definition.internal_parameters.build_identity;
    require(
        is_hex(&identity.shardlift_sha256, 64)
            && is_hex(&identity.pipeline_sha256, 64)
            && identity.tch_version == pins::TCH_VERSION
            && identity.libtorch_version == pins::LIBTORCH_VERSION,
        name,
        || "the build identity is malformed or names other versions".into(),
    )?;
    if let Some(path) = &identity.cpu_kernel_path {
        require(kernel_path::is_well_formed(path), name, || {
            format!(
                "its CPU kernel path {path:?} is not a vendor followed by kernel flags in order"
            )
        })?;
    }
    for required in ["torch/lib/libtorch_cpu.so", "torch/lib/libc10.so"] {
        require(
            identity
                .loaded_libraries
                .iter()
                .any(|l| l.name == required && is_hex(&l.sha256, 64)),
            name,
            || format!("the loaded libraries do not include {required} with its SHA-256"),
        )?;
    }
    require(
        definition.internal_parameters.nonclaims
            == pins::NONCLAIMS
                .iter()
                .map(|s| s.to_string())
                .collect::<Vec<_>>(),
        name,
        || "its nonclaims differ from this pipeline's".into(),
    )?;

    Ok(())
}

/// The bundles were bound to the same commit, dataset and libtorch as the Statement.
fn check_bundle_bindings(bundles: &Bundles<'_>, commit: &str) -> Result<(), ReleaseError> {
    let name = NAME;
    let payloads: Vec<Digest> = FASHION_MNIST
        .resources
        .iter()
        .map(|p| p.payload.sha256)
        .collect();
    for (barrier, (_, audit)) in bundles {
        require(
            audit.build.source_revision.as_deref() == Some(commit)
                && audit.build.libtorch_version == pins::LIBTORCH_VERSION
                && audit.build.tch_version == pins::TCH_VERSION
                && audit.build.dataset_payload_sha256 == payloads,
            name,
            || {
                format!(
                    "the bundle of {barrier} was bound to revision {:?}, libtorch {}, and other dataset pins than the Statement's",
                    audit.build.source_revision, audit.build.libtorch_version
                )
            },
        )?;
    }
    Ok(())
}
