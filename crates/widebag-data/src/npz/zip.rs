//! The zip container of an `.npz`: the central directory (zip64 sizes included), stored and
//! deflate members with their CRC checked, and a writer of deflated members.

use std::io::{Read, Write};

use super::fault::{Fault, fault};

pub(super) const LOCAL_SIG: u32 = 0x0403_4b50;
pub(super) const CENTRAL_SIG: u32 = 0x0201_4b50;
pub(super) const EOCD_SIG: u32 = 0x0605_4b50;
pub(super) const ZIP64_EOCD_SIG: u32 = 0x0606_4b50;
pub(super) const ZIP64_LOCATOR_SIG: u32 = 0x0706_4b50;

// Offsets come from the file: `at` may be anything, so its end is checked, not assumed.
pub(super) fn le_u16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(
        b.get(at..at.checked_add(2)?)?.try_into().ok()?,
    ))
}
pub(super) fn le_u32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(
        b.get(at..at.checked_add(4)?)?.try_into().ok()?,
    ))
}
pub(super) fn le_u64(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(
        b.get(at..at.checked_add(8)?)?.try_into().ok()?,
    ))
}

/// One archive member, located through the central directory.
pub(super) struct Entry {
    pub(super) name: String,
    pub(super) method: u16,
    pub(super) crc32: u32,
    pub(super) compressed_bytes: u64,
    pub(super) uncompressed_bytes: u64,
    pub(super) local_offset: u64,
}

/// The central directory of a zip archive held in memory.
pub(super) fn central_directory(zip: &[u8]) -> Result<Vec<Entry>, Fault> {
    const ARCHIVE: &str = "(archive)";
    if zip.len() < 22 {
        return Err(fault(
            ARCHIVE,
            0,
            format!(
                "{} bytes is too short for a zip archive (truncated?)",
                zip.len()
            ),
        ));
    }
    // The end-of-central-directory record is in the last 22 + 65535 bytes.
    let lowest = zip.len().saturating_sub(22 + 0xffff);
    let eocd = (lowest..=zip.len() - 22)
        .rev()
        .find(|&i| le_u32(zip, i) == Some(EOCD_SIG))
        .ok_or_else(|| {
            fault(
                ARCHIVE,
                zip.len() as u64,
                "no end-of-central-directory record: not a zip archive, or truncated",
            )
        })?;
    let mut n_entries = u64::from(le_u16(zip, eocd + 10).unwrap_or(0));
    let mut cd_offset = u64::from(le_u32(zip, eocd + 16).unwrap_or(0));
    if eocd >= 20 && le_u32(zip, eocd - 20) == Some(ZIP64_LOCATOR_SIG) {
        let z = le_u64(zip, eocd - 12).unwrap_or(u64::MAX) as usize;
        if z >= zip.len() {
            return Err(fault(
                ARCHIVE,
                (eocd - 12) as u64,
                format!(
                    "the zip64 locator points at byte {z}, past the end of the {}-byte file",
                    zip.len()
                ),
            ));
        }
        if le_u32(zip, z) != Some(ZIP64_EOCD_SIG) {
            return Err(fault(
                ARCHIVE,
                z as u64,
                "the zip64 end-of-central-directory record is missing",
            ));
        }
        n_entries = le_u64(zip, z + 32).unwrap_or(0);
        cd_offset = le_u64(zip, z + 48).unwrap_or(u64::MAX);
    }
    let mut entries = Vec::new();
    let mut at = usize::try_from(cd_offset).unwrap_or(usize::MAX);
    for _ in 0..n_entries {
        let bad = |m: &str| fault(ARCHIVE, at as u64, m.to_string());
        if le_u32(zip, at) != Some(CENTRAL_SIG) {
            return Err(bad("expected a central-directory header (corrupted?)"));
        }
        let field16 = |o| le_u16(zip, at + o).ok_or_else(|| bad("truncated header"));
        let field32 = |o| le_u32(zip, at + o).ok_or_else(|| bad("truncated header"));
        let method = field16(10)?;
        let crc32 = field32(16)?;
        let mut compressed_bytes = u64::from(field32(20)?);
        let mut uncompressed_bytes = u64::from(field32(24)?);
        let name_len = usize::from(field16(28)?);
        let extra_len = usize::from(field16(30)?);
        let comment_len = usize::from(field16(32)?);
        let mut local_offset = u64::from(field32(42)?);
        let name_bytes = zip
            .get(at + 46..at + 46 + name_len)
            .ok_or_else(|| bad("truncated member name"))?;
        let name = String::from_utf8_lossy(name_bytes).into_owned();
        let extra = zip
            .get(at + 46 + name_len..at + 46 + name_len + extra_len)
            .ok_or_else(|| bad("truncated extra field"))?;
        // Zip64 extra field: the 8-byte values of the fields saturated at 0xffffffff, in order.
        let mut e = 0;
        while e + 4 <= extra.len() {
            let id = le_u16(extra, e).unwrap_or(0);
            let len = usize::from(le_u16(extra, e + 2).unwrap_or(0));
            if id == 1 {
                let mut p = e + 4;
                for field in [
                    &mut uncompressed_bytes,
                    &mut compressed_bytes,
                    &mut local_offset,
                ] {
                    if *field == u64::from(u32::MAX) {
                        *field = le_u64(extra, p).ok_or_else(|| bad("truncated zip64 field"))?;
                        p += 8;
                    }
                }
            }
            e += 4 + len;
        }
        entries.push(Entry {
            name,
            method,
            crc32,
            compressed_bytes,
            uncompressed_bytes,
            local_offset,
        });
        at += 46 + name_len + extra_len + comment_len;
    }
    Ok(entries)
}

/// One member's bytes as the file stores them (compressed as `entry.method` says), and the
/// offset they start at.
pub(super) fn raw_member<'z>(zip: &'z [u8], entry: &Entry) -> Result<(usize, &'z [u8]), Fault> {
    let at = usize::try_from(entry.local_offset).unwrap_or(usize::MAX);
    let bad = |o: usize, m: &str| fault(&entry.name, o as u64, m.to_string());
    if le_u32(zip, at) != Some(LOCAL_SIG) {
        return Err(bad(at, "expected a local file header (corrupted?)"));
    }
    let name_len = usize::from(le_u16(zip, at + 26).ok_or_else(|| bad(at, "truncated header"))?);
    let extra_len = usize::from(le_u16(zip, at + 28).ok_or_else(|| bad(at, "truncated header"))?);
    let start = at + 30 + name_len + extra_len;
    let end = usize::try_from(entry.compressed_bytes)
        .ok()
        .and_then(|n| start.checked_add(n))
        .filter(|&e| e <= zip.len())
        .ok_or_else(|| {
            bad(
                start,
                &format!(
                    "member data ({} bytes) runs past the end of the file (truncated?)",
                    entry.compressed_bytes
                ),
            )
        })?;
    if !matches!(entry.method, 0 | 8) {
        let m = entry.method;
        return Err(bad(
            at,
            &format!("compression method {m} is not supported (only stored and deflate)"),
        ));
    }
    Ok((start, &zip[start..end]))
}

/// The uncompressed bytes of one member, CRC-checked.
pub(super) fn extract(zip: &[u8], entry: &Entry) -> Result<Vec<u8>, Fault> {
    let (start, raw) = raw_member(zip, entry)?;
    let bad = |o: usize, m: &str| fault(&entry.name, o as u64, m.to_string());
    // Stored (method 0) or deflate: `raw_member` refuses the others.
    let data = match entry.method == 8 {
        false => raw.to_vec(),
        true => {
            // Deflate expands at most 1032:1, so neither a claimed size nor a crafted stream
            // can make this allocate more than the member's bytes justify; one byte past the
            // claim is read so a stream longer than its directory entry is caught below.
            let most = (raw.len() as u64).saturating_mul(1032).saturating_add(1024);
            let limit = entry.uncompressed_bytes.min(most);
            let mut out = Vec::with_capacity(limit.min(1 << 26) as usize);
            flate2::read::DeflateDecoder::new(raw)
                .take(limit.saturating_add(1))
                .read_to_end(&mut out)
                .map_err(|e| bad(start, &format!("deflate data is corrupted: {e}")))?;
            out
        }
    };
    if data.len() as u64 != entry.uncompressed_bytes {
        return Err(bad(
            start,
            &format!(
                "member holds {} bytes, the directory says {} (corrupted?)",
                data.len(),
                entry.uncompressed_bytes
            ),
        ));
    }
    let crc = crc32fast::hash(&data);
    if crc != entry.crc32 {
        return Err(bad(
            start,
            &format!(
                "CRC-32 {crc:08x} does not match the recorded {:08x} (corrupted)",
                entry.crc32
            ),
        ));
    }
    Ok(data)
}

/// How members are written: deflated (scipy's `save_npz` default) or stored (numpy's `savez`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Method {
    #[cfg_attr(
        not(test),
        expect(
            dead_code,
            reason = "numpy's savez layout: the tests write it to read it"
        )
    )]
    Stored,
    Deflate,
}

/// Writes a zip archive of members (names and contents), each written as `method` says.
pub(super) fn write_zip(
    out: &mut impl Write,
    members: &[(String, Vec<u8>)],
    method: Method,
) -> std::io::Result<()> {
    let too_big = || std::io::Error::other("an npz member of 4 GiB or more needs zip64 writing");
    let mut central = Vec::new();
    let mut offset: u64 = 0;
    for (name, data) in members {
        let packed = match method {
            Method::Stored => data.clone(),
            Method::Deflate => {
                let fast = flate2::Compression::fast();
                let mut enc = flate2::write::DeflateEncoder::new(Vec::new(), fast);
                enc.write_all(data)?;
                enc.finish()?
            }
        };
        let method_id: u16 = match method {
            Method::Stored => 0,
            Method::Deflate => 8,
        };
        let crc = crc32fast::hash(data);
        let (packed_len, data_len) = (
            u32::try_from(packed.len()).map_err(|_| too_big())?,
            u32::try_from(data.len()).map_err(|_| too_big())?,
        );
        let local_offset = u32::try_from(offset).map_err(|_| too_big())?;
        let mut common = Vec::new();
        common.extend_from_slice(&20u16.to_le_bytes()); // version needed
        common.extend_from_slice(&0u16.to_le_bytes()); // flags
        common.extend_from_slice(&method_id.to_le_bytes());
        common.extend_from_slice(&0u16.to_le_bytes()); // time
        common.extend_from_slice(&0x21u16.to_le_bytes()); // date 1980-01-01
        common.extend_from_slice(&crc.to_le_bytes());
        common.extend_from_slice(&packed_len.to_le_bytes());
        common.extend_from_slice(&data_len.to_le_bytes());
        common.extend_from_slice(&(name.len() as u16).to_le_bytes());
        common.extend_from_slice(&0u16.to_le_bytes()); // extra length
        let mut local = LOCAL_SIG.to_le_bytes().to_vec();
        local.extend_from_slice(&common);
        local.extend_from_slice(name.as_bytes());
        out.write_all(&local)?;
        out.write_all(&packed)?;
        central.extend_from_slice(&CENTRAL_SIG.to_le_bytes());
        central.extend_from_slice(&20u16.to_le_bytes()); // version made by
        central.extend_from_slice(&common);
        central.extend_from_slice(&[0u8; 6]); // comment length, disk, internal attributes
        central.extend_from_slice(&0u32.to_le_bytes()); // external attrs
        central.extend_from_slice(&local_offset.to_le_bytes());
        central.extend_from_slice(name.as_bytes());
        offset += (local.len() + packed.len()) as u64;
    }
    let cd_offset = u32::try_from(offset).map_err(|_| too_big())?;
    out.write_all(&central)?;
    let mut end = EOCD_SIG.to_le_bytes().to_vec();
    end.extend_from_slice(&[0u8; 4]); // disk numbers
    end.extend_from_slice(&(members.len() as u16).to_le_bytes());
    end.extend_from_slice(&(members.len() as u16).to_le_bytes());
    end.extend_from_slice(&(central.len() as u32).to_le_bytes());
    end.extend_from_slice(&cd_offset.to_le_bytes());
    end.extend_from_slice(&0u16.to_le_bytes());
    out.write_all(&end)
}
