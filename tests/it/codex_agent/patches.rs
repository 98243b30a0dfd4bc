//! File edits as the agent makes them: `apply_patch` through the executor's file system, images
//! through `view_image`, and the project's AGENTS.md read at the start of the turn.

use super::{assert_same, Turn};
use codex_scripted_model::Step;

/// Add (into new directories), update, move and delete, and a file of 1.8 MB.
#[tokio::test]
async fn apply_patch_add_update_move_delete() {
    let large: String = (0..20_000)
        .map(|n| format!("+line {n:05} {}\n", "x".repeat(80)))
        .collect();
    let outcome = assert_same(
        &Turn::new(vec![
            Step::patch("*** Add File: new/deep/dir/added.txt\n+added\n"),
            Step::patch("*** Update File: edit.txt\n@@\n one\n-two\n+TWO\n three\n"),
            Step::patch(
                "*** Update File: move.txt\n*** Move to: moved/there.txt\n@@\n-old\n+new\n",
            ),
            Step::patch("*** Delete File: gone.txt\n"),
            Step::patch(&format!("*** Add File: big/large.txt\n{large}")),
            Step::sh("wc -c big/large.txt; ls -R"),
        ])
        .file("edit.txt", "one\ntwo\nthree\n")
        .file("move.txt", "old\n")
        .file("gone.txt", "bye\n"),
    )
    .await;
    assert_eq!(outcome.files["work/new/deep/dir/added.txt"], "added\n");
    assert_eq!(outcome.files["work/edit.txt"], "one\nTWO\nthree\n");
    assert_eq!(outcome.files["work/moved/there.txt"], "new\n");
    assert!(!outcome.files.contains_key("work/move.txt"));
    assert!(!outcome.files.contains_key("work/gone.txt"));
    let large_bytes = 20_000 * "line 00000 \n".len() + 20_000 * 80;
    assert!(outcome.files["work/big/large.txt"].starts_with(&format!("{large_bytes} bytes")));
}

/// A patch that does not apply fails the same way on both.
#[tokio::test]
async fn apply_patch_failures() {
    assert_same(
        &Turn::new(vec![
            Step::patch("*** Update File: missing.txt\n@@\n-a\n+b\n"),
            Step::patch("*** Update File: edit.txt\n@@\n-not there\n+b\n"),
            Step::patch("*** Delete File: nothing.txt\n"),
        ])
        .file("edit.txt", "one\n"),
    )
    .await;
}

/// A 1x1 PNG.
const PNG: &[u8] = &[
    0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44, 0x52,
    0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x06, 0x00, 0x00, 0x00, 0x1f, 0x15, 0xc4,
    0x89, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x44, 0x41, 0x54, 0x78, 0x9c, 0x63, 0xf8, 0xcf, 0xc0, 0xf0,
    0x1f, 0x00, 0x05, 0x00, 0x01, 0xff, 0x89, 0x99, 0x3d, 0x1d, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45,
    0x4e, 0x44, 0xae, 0x42, 0x60, 0x82,
];

/// `view_image` reads the image through the executor and hands it to the model.
#[tokio::test]
async fn view_image() {
    let outcome = assert_same(
        &Turn::new(vec![
            Step::ViewImage("{run}/work/pixel.png".into()),
            Step::ViewImage("{run}/work/missing.png".into()),
        ])
        .file("pixel.png", PNG),
    )
    .await;
    let told = outcome.told[0].as_deref().unwrap();
    assert!(told.contains("<image>"), "{told}");
}

/// The project's AGENTS.md reaches the model through the executor's file system.
#[tokio::test]
async fn agents_md() {
    let outcome = assert_same(
        &Turn::new(vec![Step::sh("true")]).file("AGENTS.md", "Always answer in haiku: XYZZY-42\n"),
    )
    .await;
    assert!(
        outcome
            .project_docs
            .iter()
            .any(|text| text.contains("XYZZY-42")),
        "{:?}",
        outcome.project_docs
    );
}
