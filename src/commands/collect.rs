//! `wai collect`: an OTLP/HTTP receiver that lands traces in a lake.

use std::net::ToSocketAddrs as _;
use std::sync::Arc;

use super::{Context, Outcome};
use crate::cli::CollectArgs;
use crate::error::{Error, ExitStatus, Result};
use crate::pipeline::collect::{self, Config};
use crate::pipeline::ingest::{Format, Options, OtelFields};
use crate::report::envelope::{Envelope, Output};

/// The bearer token in `path`: its first line, trimmed.
fn token(path: &std::path::Path) -> Result<Vec<u8>> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        Error::Usage(format!(
            "--token-file `{}` cannot be read: {e}",
            path.display()
        ))
    })?;
    let token = text.lines().next().unwrap_or("").trim();
    if token.is_empty() {
        return Err(Error::Usage(format!(
            "--token-file `{}` is empty: put the token on its first line",
            path.display()
        )));
    }
    if token.len() < 16 {
        return Err(Error::Usage(format!(
            "the token in `{}` is {} characters: use at least 16 (`openssl rand -hex 32`)",
            path.display(),
            token.len()
        )));
    }
    Ok(token.as_bytes().to_vec())
}

/// The TLS configuration from a certificate chain and a key, both PEM.
fn tls(
    cert: &std::path::Path,
    key: &std::path::Path,
) -> Result<Arc<tokio_rustls::rustls::ServerConfig>> {
    use rustls::pki_types::pem::PemObject as _;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    use tokio_rustls::rustls;
    let bad = |what: &str, path: &std::path::Path, e: &dyn std::fmt::Display| {
        Error::Usage(format!("--{what} `{}`: {e}", path.display()))
    };
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .map_err(|e| bad("tls-cert", cert, &e))?
        .collect::<std::result::Result<_, _>>()
        .map_err(|e| bad("tls-cert", cert, &e))?;
    if certs.is_empty() {
        return Err(bad("tls-cert", cert, &"holds no PEM certificate"));
    }
    let key = PrivateKeyDer::from_pem_file(key).map_err(|e| bad("tls-key", key, &e))?;
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| Error::Internal(format!("TLS: {e}")))?
    .with_no_client_auth()
    .with_single_cert(certs, key)
    .map_err(|e| {
        Error::Usage(format!(
            "--tls-cert and --tls-key do not make a TLS identity: {e}"
        ))
    })?;
    Ok(Arc::new(config))
}

/// Checks every option, before any work.
fn config(ctx: &Context, args: &CollectArgs) -> Result<Config> {
    let listen = args
        .listen
        .to_socket_addrs()
        .map_err(|e| Error::Usage(format!("--listen `{}` is not HOST:PORT: {e}", args.listen)))?
        .next()
        .ok_or_else(|| Error::Usage(format!("--listen `{}` names no address", args.listen)))?;
    let token = args.token_file.as_deref().map(token).transpose()?;
    if token.is_none() && !listen.ip().is_loopback() && !args.insecure {
        return Err(Error::Usage(format!(
            "--listen {listen} is reachable from other machines, and no --token-file is given: give one (requests then need `Authorization: Bearer TOKEN`), listen on 127.0.0.1, or pass --insecure"
        )));
    }
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(c), Some(k)) => Some(tls(c, k)?),
        _ => None,
    };
    if args.max_body > args.max_buffer {
        return Err(Error::Usage(format!(
            "--max-body ({} bytes) is larger than --max-buffer ({} bytes): no such request could ever be taken",
            args.max_body, args.max_buffer
        )));
    }
    if args.max_open < args.idle {
        return Err(Error::Usage(format!(
            "--max-open ({:?}) is shorter than --idle ({:?})",
            args.max_open, args.idle
        )));
    }
    let listener = std::net::TcpListener::bind(listen)
        .map_err(|e| Error::Usage(format!("cannot listen on {listen}: {e}")))?;
    let max_body = usize::try_from(args.max_body)
        .map_err(|_| Error::Usage("--max-body is too large for this machine".into()))?;
    Ok(Config {
        listen,
        listener,
        lake: args.lake.clone(),
        token,
        tls,
        idle: args.idle,
        max_open: args.max_open,
        max_buffer: args.max_buffer,
        max_body,
        header_timeout: args.header_timeout,
        body_timeout: args.body_timeout,
        keep_raw: args.keep_raw,
        once: args.once,
        options: Options {
            format: Format::Otel,
            task_field: None,
            trial_field: None,
            reward_field: None,
            messages_field: None,
            privileged: Vec::new(),
            otel: OtelFields {
                reward_attr: args.reward_attr.clone(),
                task_attr: args.task_attr.clone(),
                ..OtelFields::default()
            },
            score: None,
        },
        max_segment: 64 << 20,
        quiet: ctx.quiet,
    })
}

/// Runs `wai collect`.
pub(crate) fn run(ctx: &Context, args: &CollectArgs) -> Result<Outcome> {
    let cfg = config(ctx, args)?;
    crate::pipeline::lake::Lake::init(&args.lake)?;
    let lake = args.lake.display().to_string();
    let got = collect::collect(ctx, cfg)?;
    let text = format!(
        "collected {} spans and {} log records on {} ({} set aside, {} replayed from the log); wrote {} rows in {} partitions under `{lake}/collected/`",
        got.spans,
        got.log_records,
        got.address,
        got.rejected,
        got.replayed,
        got.rows,
        got.partitions
    );
    let json = Envelope::new("collect", &got)
        .output(Output::new(format!("{lake}/collected"), "rows").rows(got.rows))
        .to_json()?;
    Ok(Outcome {
        text,
        json,
        status: ExitStatus::Success,
    })
}
