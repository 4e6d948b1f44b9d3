//! Model spec strings: which provider, which model, where it is served, and the key it needs.
//!
//! The forms: `openai:MODEL`, `anthropic:MODEL`, `fireworks:MODEL`, `ollama:MODEL`, and
//! `endpoint:MODEL@URL` for any OpenAI-compatible server (vLLM, `SGLang`, TGI, LM Studio, the
//! llama.cpp server); `vllm:MODEL@URL` is the reference's spelling of the same thing. Keys come
//! from the usual variables (`OPENAI_API_KEY`, `ANTHROPIC_API_KEY`, `FIREWORKS_API_KEY`,
//! `VLLM_API_KEY` for an endpoint); `OPENAI_BASE_URL`, `ANTHROPIC_BASE_URL` and `OLLAMA_HOST`
//! move a provider's server, as in the providers' own clients.

use std::fmt;

use url::Url;

use crate::error::{Error, Result};

/// The spec forms, as the messages list them.
pub const FORMS: &str = "`openai:MODEL`, `anthropic:MODEL`, `fireworks:MODEL`, `ollama:MODEL` or `endpoint:MODEL@URL` (any OpenAI-compatible server)";

/// Who serves the model, and so which wire protocol it speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Provider {
    /// OpenAI's API (or what `OPENAI_BASE_URL` names).
    OpenAi,
    /// Anthropic's Messages API.
    Anthropic,
    /// Fireworks' OpenAI-compatible API.
    Fireworks,
    /// Ollama's OpenAI-compatible API.
    Ollama,
    /// Any OpenAI-compatible server at a URL.
    Endpoint,
}

impl Provider {
    /// The provider's name in spec strings.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::OpenAi => "openai",
            Self::Anthropic => "anthropic",
            Self::Fireworks => "fireworks",
            Self::Ollama => "ollama",
            Self::Endpoint => "endpoint",
        }
    }

    /// The variable the key is read from.
    pub fn key_var(self) -> Option<&'static str> {
        match self {
            Self::OpenAi => Some("OPENAI_API_KEY"),
            Self::Anthropic => Some("ANTHROPIC_API_KEY"),
            Self::Fireworks => Some("FIREWORKS_API_KEY"),
            Self::Endpoint => Some("VLLM_API_KEY"),
            Self::Ollama => None,
        }
    }

    /// Whether the wire protocol is Anthropic's Messages API (else OpenAI's chat completions).
    pub fn is_anthropic(self) -> bool {
        self == Self::Anthropic
    }

    fn from_name(name: &str) -> Option<Self> {
        Some(match name {
            "openai" => Self::OpenAi,
            "anthropic" => Self::Anthropic,
            "fireworks" => Self::Fireworks,
            "ollama" => Self::Ollama,
            "endpoint" | "vllm" => Self::Endpoint,
            _ => return None,
        })
    }
}

/// The provider names a spec may start with (`vllm` is another name for `endpoint`).
pub const PROVIDERS: [&str; 6] = [
    "openai",
    "anthropic",
    "fireworks",
    "ollama",
    "endpoint",
    "vllm",
];

/// A parsed model spec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelSpec {
    /// Who serves it.
    pub provider: Provider,
    /// The model name sent in requests and recorded on rows.
    pub model: String,
    /// The API's base URL, without a trailing `/` (e.g. `https://api.openai.com/v1`).
    pub base_url: String,
    /// The spec as written.
    pub text: String,
}

impl fmt::Display for ModelSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

fn env(name: &str) -> Option<String> {
    std::env::var(name)
        .ok()
        .map(|v| v.trim().to_owned())
        .filter(|v| !v.is_empty())
}

/// `url` as an API base: no trailing `/`, a known endpoint path taken off, `/v1` added when the
/// path does not end in a version.
fn api_base(url: &str) -> String {
    let mut base = url.trim().trim_end_matches('/');
    for tail in ["/chat/completions", "/embeddings", "/messages"] {
        base = base.strip_suffix(tail).unwrap_or(base);
    }
    let base = base.to_owned();
    let versioned = base.rsplit('/').next().is_some_and(|last| {
        last.len() >= 2 && last.starts_with('v') && last[1..].bytes().all(|b| b.is_ascii_digit())
    });
    if versioned {
        base
    } else {
        format!("{base}/v1")
    }
}

impl ModelSpec {
    /// Parses `text`.
    ///
    /// # Errors
    /// A usage error naming what to type: no provider, an unknown one, the `provider/model`
    /// spelling, no model, or an endpoint without `@URL`.
    pub fn parse(text: &str) -> Result<Self> {
        let given = text.trim();
        if given.is_empty() {
            return Err(Error::Usage(format!(
                "the model spec is empty: write {FORMS}"
            )));
        }
        let Some((head, rest)) = given.split_once(':') else {
            if let Some((head, rest)) = given.split_once('/')
                && Provider::from_name(head).is_some()
                && !rest.is_empty()
            {
                return Err(Error::Usage(format!(
                    "the model spec `{given}` uses a slash: wai writes `{head}:{rest}`"
                )));
            }
            return Err(Error::Usage(format!(
                "the model spec `{given}` names no provider: write `openai:{given}`, `anthropic:{given}`, or `endpoint:{given}@http://HOST:PORT/v1` for your own server"
            )));
        };
        if head.starts_with("http") && rest.starts_with("//") {
            return Err(Error::Usage(format!(
                "the model spec `{given}` is a URL: write `endpoint:MODEL@{given}`"
            )));
        }
        let provider = Provider::from_name(head).ok_or_else(|| {
            Error::Usage(format!(
                "the model spec `{given}` names no provider wai knows (`{head}`): write {FORMS}"
            ))
        })?;
        let (model, base_url) = match provider {
            Provider::Endpoint => {
                let at = rest.rfind("@http").ok_or_else(|| {
                    Error::Usage(format!(
                        "the model spec `{given}` gives no server: write `{head}:{}@http://HOST:PORT/v1`",
                        if rest.is_empty() { "MODEL" } else { rest }
                    ))
                })?;
                let url = &rest[at + 1..];
                Url::parse(url).map_err(|e| {
                    Error::Usage(format!(
                        "the model spec `{given}`: `{url}` is not a URL ({e})"
                    ))
                })?;
                (rest[..at].to_owned(), api_base(url))
            }
            Provider::OpenAi => (
                rest.to_owned(),
                env("OPENAI_BASE_URL")
                    .map_or_else(|| "https://api.openai.com/v1".to_owned(), |u| api_base(&u)),
            ),
            Provider::Anthropic => (
                rest.to_owned(),
                env("ANTHROPIC_BASE_URL").map_or_else(
                    || "https://api.anthropic.com/v1".to_owned(),
                    |u| api_base(&u),
                ),
            ),
            Provider::Fireworks => (
                rest.to_owned(),
                "https://api.fireworks.ai/inference/v1".to_owned(),
            ),
            Provider::Ollama => (
                rest.to_owned(),
                env("OLLAMA_HOST").map_or_else(
                    || "http://localhost:11434/v1".to_owned(),
                    |h| {
                        api_base(&if h.contains("://") {
                            h
                        } else {
                            format!("http://{h}")
                        })
                    },
                ),
            ),
        };
        if model.trim().is_empty() {
            return Err(Error::Usage(format!(
                "the model spec `{given}` names no model: write `{head}:MODEL{}`",
                if provider == Provider::Endpoint {
                    "@URL"
                } else {
                    ""
                }
            )));
        }
        Ok(Self {
            provider,
            model: model.trim().to_owned(),
            base_url,
            text: given.to_owned(),
        })
    }

    /// The host the calls go to.
    pub fn host(&self) -> String {
        Url::parse(&self.base_url)
            .ok()
            .and_then(|u| u.host_str().map(str::to_owned))
            .unwrap_or_default()
    }

    /// Whether the server is on this machine (no key needed, plain http fine).
    pub fn is_loopback(&self) -> bool {
        let host = self.host();
        let host = host.trim_start_matches('[').trim_end_matches(']');
        host == "localhost"
            || host == "::1"
            || host
                .parse::<std::net::Ipv4Addr>()
                .is_ok_and(|ip| ip.is_loopback())
    }

    /// Whether calls would travel as plain http.
    pub fn is_plain_http(&self) -> bool {
        self.base_url.starts_with("http://")
    }

    /// The key from the environment, if set.
    pub fn key(&self) -> Option<String> {
        self.provider.key_var().and_then(env)
    }

    /// Whether calls need a key: a provider's own API does, an endpoint or a server on this
    /// machine does not.
    pub fn needs_key(&self) -> bool {
        matches!(
            self.provider,
            Provider::OpenAi | Provider::Anthropic | Provider::Fireworks
        ) && !self.is_loopback()
    }

    /// Checks, before any call: a key where one is needed, and no plain http to another host
    /// unless `allow_http`.
    ///
    /// # Errors
    /// A usage error naming the variable to set or the flag to pass.
    pub fn check(&self, allow_http: bool) -> Result<()> {
        if self.is_plain_http() && !self.is_loopback() && !allow_http {
            return Err(Error::Usage(format!(
                "`{}` would send requests (and any key) over plain http to {}: use https, or pass `--allow-http` if the network is yours",
                self.text,
                self.host()
            )));
        }
        if self.needs_key() && self.key().is_none() {
            let var = self.provider.key_var().unwrap_or("a key");
            return Err(Error::Usage(format!(
                "`{}` needs a key: set {var}",
                self.text
            )));
        }
        Ok(())
    }

    /// The chat URL: `/chat/completions`, or `/messages` for Anthropic.
    pub fn chat_url(&self) -> String {
        if self.provider.is_anthropic() {
            format!("{}/messages", self.base_url)
        } else {
            format!("{}/chat/completions", self.base_url)
        }
    }

    /// The embeddings URL.
    pub fn embeddings_url(&self) -> String {
        format!("{}/embeddings", self.base_url)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(text: &str) -> String {
        match ModelSpec::parse(text) {
            Err(Error::Usage(m)) => m,
            other => panic!("{text}: {other:?}"),
        }
    }

    #[test]
    fn parses_each_form() {
        let s = ModelSpec::parse("endpoint:Qwen/Qwen3-4B@http://127.0.0.1:8000/v1/").unwrap();
        assert_eq!(s.provider, Provider::Endpoint);
        assert_eq!(s.model, "Qwen/Qwen3-4B");
        assert_eq!(s.base_url, "http://127.0.0.1:8000/v1");
        assert_eq!(s.chat_url(), "http://127.0.0.1:8000/v1/chat/completions");
        assert!(s.is_loopback() && !s.needs_key());
        let s = ModelSpec::parse("vllm:m@http://h:1").unwrap();
        assert_eq!(
            (s.provider, s.base_url.as_str()),
            (Provider::Endpoint, "http://h:1/v1")
        );
        let s = ModelSpec::parse("ollama:llama3.1:8b").unwrap();
        assert_eq!(s.model, "llama3.1:8b");
        let s = ModelSpec::parse("anthropic:claude-haiku-4-5").unwrap();
        assert_eq!(s.chat_url().rsplit('/').next(), Some("messages"));
        let s =
            ModelSpec::parse("endpoint:m@https://x.example/openai/v1/chat/completions").unwrap();
        assert_eq!(s.base_url, "https://x.example/openai/v1");
    }

    #[test]
    fn wrong_spellings_name_what_to_type() {
        assert!(usage("openai/gpt-4.1-mini").contains("`openai:gpt-4.1-mini`"));
        assert!(usage("gpt-4.1-mini").contains("`openai:gpt-4.1-mini`"));
        assert!(usage("gpt-4.1-mini").contains("endpoint:gpt-4.1-mini@"));
        assert!(usage("Openai:gpt").contains("no provider wai knows"));
        assert!(usage("endpoint:m").contains("`endpoint:m@http://HOST:PORT/v1`"));
        assert!(usage("openai:").contains("names no model"));
        assert!(usage("http://h:1/v1").contains("endpoint:MODEL@http://h:1/v1"));
    }

    #[test]
    fn plain_http_elsewhere_is_refused_unless_allowed() {
        let s = ModelSpec::parse("endpoint:m@http://10.0.0.5:8000/v1").unwrap();
        assert!(usage_of(s.check(false)).contains("--allow-http"));
        assert!(s.check(true).is_ok());
        let local = ModelSpec::parse("endpoint:m@http://localhost:8000").unwrap();
        assert!(local.check(false).is_ok());
    }

    fn usage_of(r: Result<()>) -> String {
        match r {
            Err(Error::Usage(m)) => m,
            other => panic!("{other:?}"),
        }
    }
}
