//! Trace files for the ingest benches, made from the fixtures the real libraries wrote
//! (`tests/fixtures/ingest/`): each record is copied with fresh ids until the file holds as many
//! samples or spans as asked, so its shape is the libraries' own.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use serde_json::Value;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/ingest")
        .join(name)
}

/// Writes an `inspect_ai` `.eval` log of `n` samples (zstd members, as inspect writes them)
/// from the 12 samples of `inspect/orders.eval`, each copy with its own id, epoch and uuid.
/// Returns the bytes of sample JSON written (uncompressed).
pub(crate) fn write_eval(out: &Path, n: usize) -> u64 {
    let file = std::fs::File::open(fixture("inspect/orders.eval")).expect("orders.eval");
    let mut zip = zip::ZipArchive::new(file).expect("a zip");
    let mut samples: Vec<Value> = Vec::new();
    let mut others: Vec<(String, Vec<u8>)> = Vec::new();
    for i in 0..zip.len() {
        let mut member = zip.by_index(i).expect("member");
        let name = member.name().to_owned();
        let mut text = Vec::new();
        member.read_to_end(&mut text).expect("read");
        if name.starts_with("samples/") {
            samples.push(serde_json::from_slice(&text).expect("a sample"));
        } else {
            others.push((name, text));
        }
    }
    let w = std::io::BufWriter::new(std::fs::File::create(out).expect("eval file"));
    let mut zip = zip::ZipWriter::new(w);
    let options = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Zstd)
        .large_file(false);
    for (name, text) in &others {
        zip.start_file(name.as_str(), options).expect("member");
        zip.write_all(text).expect("write");
    }
    let mut bytes = 0u64;
    for i in 0..n {
        let mut s = samples[i % samples.len()].clone();
        let round = i / samples.len();
        let id = format!("{}-{round}", s["id"].as_str().unwrap_or("s"));
        let epoch = s["epoch"].as_i64().unwrap_or(1);
        s["id"] = Value::from(id.clone());
        s["uuid"] = Value::from(format!("{}-{i}", s["uuid"].as_str().unwrap_or("u")));
        let text = serde_json::to_vec(&s).expect("json");
        bytes += text.len() as u64;
        zip.start_file(format!("samples/{id}_epoch_{epoch}.json"), options)
            .expect("member");
        zip.write_all(&text).expect("write");
    }
    zip.finish().expect("finish").flush().expect("flush");
    bytes
}

/// The hex ids (`traceId`, `spanId`, `parentSpanId`) in an OTLP document, each once.
fn ids(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(o) => {
            for (k, v) in o {
                if matches!(k.as_str(), "traceId" | "spanId" | "parentSpanId")
                    && let Some(s) = v.as_str()
                    && s.len() >= 16
                    && !out.iter().any(|x| x == s)
                {
                    out.push(s.to_owned());
                }
                ids(v, out);
            }
        }
        Value::Array(l) => l.iter().for_each(|v| ids(v, out)),
        _ => {}
    }
}

/// Writes OTLP JSON traces and logs files holding `spans` spans in all, from the openai-v2
/// `event_only` fixtures (four rollouts of four spans a document, message content in log
/// records joined to their spans): each copy a line, every trace and span id renewed. Returns
/// the bytes written.
pub(crate) fn write_otlp(traces: &Path, logs: &Path, spans: usize) -> u64 {
    let read = |name: &str| std::fs::read_to_string(fixture(name)).expect("fixture");
    let t = read("otel/openai_v2_event_only.traces.jsonl");
    let l = read("otel/openai_v2_event_only.logs.jsonl");
    let (t, l) = (t.trim(), l.trim());
    let doc: Value = serde_json::from_str(t).expect("traces");
    let per_doc = doc["resourceSpans"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|r| r["scopeSpans"].as_array().into_iter().flatten())
        .map(|s| s["spans"].as_array().map_or(0, Vec::len))
        .sum::<usize>();
    let mut all = Vec::new();
    ids(&doc, &mut all);
    let mut tw = std::io::BufWriter::new(std::fs::File::create(traces).expect("traces"));
    let mut lw = std::io::BufWriter::new(std::fs::File::create(logs).expect("logs"));
    let mut bytes = 0u64;
    for copy in 0..spans.div_ceil(per_doc) {
        let renew = |text: &str| {
            let mut text = text.to_owned();
            for id in &all {
                text = text.replace(id.as_str(), &format!("{copy:08x}{}", &id[8..]));
            }
            text
        };
        let (a, b) = (renew(t), renew(l));
        bytes += (a.len() + b.len() + 2) as u64;
        writeln!(tw, "{a}").expect("write");
        writeln!(lw, "{b}").expect("write");
    }
    tw.flush().expect("flush");
    lw.flush().expect("flush");
    bytes
}
