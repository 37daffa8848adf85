//! Tests of the streamed packs of documents: a directory labelled by file names and a dictd
//! database (plain and gzip), each byte for byte the pack of the source read whole, with bad
//! files and entries skipped alike or refused naming them and leaving no output; and the
//! streamed dictionary's blocks against the text sliced whole.

use std::io::Write;

use super::*;
use crate::packed::write::pack;
use crate::source::Source;
use widebag_kinds::{Format, TextMode, TokenFormat};

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("widebag-docs-pack-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn options() -> PackOptions {
    PackOptions {
        block_rows: 16,
        ..PackOptions::default()
    }
}

/// Packs `source` streamed (`streamed`, into its argument) and read whole, beside it, and checks
/// the two files are the same bytes.
fn same_bytes(source: &Source, streamed: impl Fn(&Path) -> Result<PackMeta, DataError>) {
    let d = source.path.parent().unwrap().join("packed");
    std::fs::create_dir_all(&d).unwrap();
    let (a, b) = (d.join("streamed.wbp"), d.join("whole.wbp"));
    let meta = streamed(&a).unwrap();
    let loaded = crate::open::load(source).unwrap();
    let whole = pack(&loaded, &source.variant(), &b, options()).unwrap();
    assert_eq!(meta, whole);
    assert_eq!(std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap());
}

fn directory(s: &Source) -> impl Fn(&Path) -> Result<PackMeta, DataError> + '_ {
    move |out| {
        let text = (&s.text, &s.label);
        crate::text_pack::pack_text(&s.path, &s.read, text, &s.variant(), out, options())
    }
}

fn dictd(s: &Source) -> impl Fn(&Path) -> Result<PackMeta, DataError> + '_ {
    move |out| pack_dictd(&s.path, &s.read, &s.text, &s.variant(), out, options())
}

/// The error `streamed` gives packing into a fresh name in `d`, with no output left.
fn refused(d: &Path, streamed: impl Fn(&Path) -> Result<PackMeta, DataError>) -> String {
    let out = d.join("bad.wbp");
    let e = streamed(&out).unwrap_err();
    assert!(!out.exists(), "{e}");
    e.to_string()
}

#[test]
fn a_labelled_directory_streams_to_the_whole_reads_pack_byte_for_byte() {
    let tree = dir("labelled").join("brown");
    std::fs::create_dir_all(tree.join("sub")).unwrap();
    // 150 documents (three passes' batches of files) in 7 genres, one nested, one empty.
    let words = [
        "The/at", "cat/nn", "sat/vbd", "on/in", "a/at", "mat/nn", "./.",
    ];
    for f in 0..150usize {
        let text: Vec<&str> = (0..f % 19).map(|k| words[(f * 5 + k * k) % 7]).collect();
        let at = match f % 40 == 7 {
            true => tree.join("sub"),
            false => tree.clone(),
        };
        let genre = (b'a' + (f % 7) as u8) as char;
        std::fs::write(at.join(format!("c{genre}{f:02}")), text.join(" ")).unwrap();
    }
    std::fs::write(tree.join(".hidden"), "zebra/nn").unwrap();
    let mut source = Source::new(&tree, Format::Text);
    source.text.tokens = TokenFormat::Tagged;
    source.label = LabelOptions::file_name(1, 2);
    same_bytes(&source, directory(&source));
    let packed = directory(&source)(&dir("labelled-meta").join("p.wbp")).unwrap();
    assert_eq!(packed.labels.as_ref().map(Vec::len), Some(7));
    assert_eq!(packed.n_classes, 7);
    // A file that is not UTF-8: skipped and counted alike, or refused naming its line.
    std::fs::write(tree.join("sub/cz99"), b"cat/nn\nsat/vbd \xff").unwrap();
    source.read.skip_bad_lines = true;
    same_bytes(&source, directory(&source));
    source.read.skip_bad_lines = false;
    let e = refused(tree.parent().unwrap(), directory(&source));
    assert!(e.contains("cz99:2:9"), "{e}");
    // A name too short for the label's characters is refused naming the file and the key.
    std::fs::remove_file(tree.join("sub/cz99")).unwrap();
    std::fs::write(tree.join("x"), "cat/nn").unwrap();
    let e = refused(tree.parent().unwrap(), directory(&source));
    assert!(e.contains("data.label_chars") && e.contains("`x`"), "{e}");
    // Labels need bow rows.
    std::fs::remove_file(tree.join("x")).unwrap();
    source.text.mode = TextMode::Cbow;
    let e = refused(tree.parent().unwrap(), directory(&source));
    assert!(e.contains("data.label"), "{e}");
}

/// A dictionary of `entries` blocks of words over more than two of the reader's chunks, and its
/// index: headwords in alphabetical order (so offsets out of order), two sharing a block.
fn dictionary(d: &Path, entries: usize) -> (Vec<u8>, String) {
    let words = [
        "noun", "a", "small", "animal", "of", "the", "cat", "kind", "verb", "run",
    ];
    let (mut text, mut blocks) = (Vec::new(), Vec::new());
    let mut x = 7u64;
    for e in 0..entries {
        let start = text.len();
        let mut entry = format!("head{e}\n  ");
        for _ in 0..(5 + e % 300) {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
            entry.push_str(words[((x >> 33) % 10).min((x >> 40) % 7) as usize]);
            entry.push(' ');
        }
        entry.push('\n');
        text.extend_from_slice(entry.as_bytes());
        blocks.push((start, entry.len()));
    }
    let b64 = |mut n: usize| {
        const DIGITS: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        let mut s = Vec::new();
        loop {
            s.push(DIGITS[n % 64]);
            n /= 64;
            if n == 0 {
                break;
            }
        }
        s.reverse();
        String::from_utf8(s).unwrap()
    };
    let mut lines: Vec<String> = (blocks.iter().enumerate())
        .map(|(e, &(o, l))| format!("head{e}\t{}\t{}", b64(o), b64(l)))
        .collect();
    lines.push(format!("alias\t{}\t{}", b64(blocks[3].0), b64(blocks[3].1)));
    lines.sort();
    std::fs::write(d.join("d.dict"), &text).unwrap();
    (text, lines.join("\n") + "\n")
}

#[test]
fn a_dictd_database_streams_to_the_whole_reads_pack_byte_for_byte() {
    let d = dir("dictd");
    let (text, index) = dictionary(&d, 4000);
    assert!(text.len() > 2 << 20, "more than two of the reader's chunks");
    std::fs::write(d.join("d.index"), &index).unwrap();
    // The streamed blocks are the text sliced whole, in offset order, one per distinct block.
    let (docs, skipped, _) = crate::dictd::dictd_documents(&d.join("d.index"), false).unwrap();
    assert_eq!((docs.len(), skipped), (4000, 0));
    assert!(docs[3999].starts_with("head3999\n"));
    let joined: String = docs.concat();
    assert_eq!(joined.as_bytes(), &text[..]);
    let mut source = Source::new(d.join("d.index"), Format::Dictd);
    same_bytes(&source, dictd(&source));
    source.text.mode = TextMode::Cbow;
    source.text.window = 3;
    same_bytes(&source, dictd(&source));
    // The same database gzip-compressed (as dictzip's `.dict.dz` is read).
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(&text).unwrap();
    std::fs::write(d.join("d.dict.dz"), gz.finish().unwrap()).unwrap();
    std::fs::remove_file(d.join("d.dict")).unwrap();
    same_bytes(&source, dictd(&source));
    // An entry past the text's end: skipped and counted alike, or refused naming its line.
    let past = format!("zz\tA\t{}\n", "/".repeat(5));
    std::fs::write(d.join("d.index"), format!("{index}{past}")).unwrap();
    source.read.skip_bad_lines = true;
    same_bytes(&source, dictd(&source));
    source.read.skip_bad_lines = false;
    let e = refused(&d, dictd(&source));
    assert!(
        e.contains("d.index:4002:4") && e.contains("runs past"),
        "{e}"
    );
    // A block that is not UTF-8: refused naming its line and column in the decompressed text.
    let mut bad = text.clone();
    let at = docs[..10].iter().map(String::len).sum::<usize>() + 8;
    bad[at] = 0xff;
    std::fs::write(d.join("d.dict"), &bad).unwrap();
    std::fs::remove_file(d.join("d.dict.dz")).unwrap();
    std::fs::write(d.join("d.index"), &index).unwrap();
    let e = refused(&d, dictd(&source));
    let line = 1 + text[..at].iter().filter(|&&b| b == b'\n').count();
    let column = at - text[..at].iter().rposition(|&b| b == b'\n').unwrap();
    assert!(e.contains(&format!("d.dict:{line}:{column}")), "{e}");
}
