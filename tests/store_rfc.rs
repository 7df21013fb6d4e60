//! RFC 0001's writer barrier list must equal `Barrier::ALL`, in order.
use shardlift::store::Barrier;

#[test]
fn rfc_barrier_list_equals_the_enum_in_order() {
    let rfc = include_str!("../docs/rfc/0001-commit-protocol.md");
    let section = rfc
        .split("\n## 4. Writer")
        .nth(1)
        .and_then(|rest| rest.split("\n## ").next())
        .expect("RFC has a §4 Writer section");
    let mut names = Vec::new();
    for line in section.lines() {
        let Some((number, name)) = line.split_once(". ") else {
            continue;
        };
        if number.chars().all(|c| c.is_ascii_digit()) && !number.is_empty() {
            assert_eq!(number.parse::<usize>().expect("number"), names.len() + 1);
            names.push(name.trim().to_owned());
        }
    }
    let expected: Vec<String> = Barrier::ALL.iter().map(|b| b.name().to_owned()).collect();
    assert_eq!(names, expected);
    assert!(names.len() >= 10);
    assert!(names.iter().any(|n| n == "commit-after-file-fsync"));
    assert!(names.iter().any(|n| n == "commit-after-rename"));
}
