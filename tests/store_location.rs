//! `--store`'s one parse: a directory, or an `s3://bucket[/prefix]` that must be valid.
use std::path::PathBuf;

use shardlift::store::location::{Location, LocationError, S3Location};

#[test]
fn a_path_is_a_directory_and_an_s3_url_a_bucket_prefix() {
    assert_eq!(
        "ckpt/store".parse::<Location>(),
        Ok(Location::Dir(PathBuf::from("ckpt/store")))
    );
    let s3 = "s3://bucket-1/runs/a/".parse::<Location>().expect("valid");
    let Location::S3(location) = &s3 else {
        panic!("an s3:// location: {s3:?}");
    };
    assert_eq!(
        location,
        &S3Location {
            bucket: "bucket-1".into(),
            prefix: "runs/a".into()
        }
    );
    assert_eq!(s3.to_string(), "s3://bucket-1/runs/a");
    assert_eq!(
        location.key_url("refs/LATEST"),
        "s3://bucket-1/runs/a/refs/LATEST"
    );
}

#[test]
fn a_bad_bucket_name_is_refused_with_its_reason() {
    let error: LocationError = "s3://B".parse::<Location>().expect_err("bad bucket");
    assert_eq!(error.url, "s3://B");
    assert!(error.reason.contains("bucket name"), "{error}");
}

#[test]
fn a_dot_segment_in_the_prefix_is_refused() {
    let error = "s3://bucket/a/../b"
        .parse::<Location>()
        .expect_err("dot segment");
    assert!(error.reason.contains("prefix segments"), "{error}");
}

#[test]
fn an_s3_location_parses_only_from_an_s3_url() {
    let error = "/tmp/store".parse::<S3Location>().expect_err("not s3");
    assert!(error.reason.contains("s3://"), "{error}");
}
