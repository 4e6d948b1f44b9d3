//! DataFusion plans on a cluster of `wai worker`s: `datafusion-distributed` (Arrow Flight over
//! gRPC) splits a plan into stages, sends the table-level ones (scans, filters, per-task
//! aggregates, joins) to the workers, and runs the head of the plan here.
//!
//! A command given `--cluster URL,...` first asks every worker for its version (each must be this
//! wai's, [`VERSION`]), then makes every DataFusion session of the process a distributed one
//! ([`join`]); what is not a DataFusion plan (the bootstrap, the permutation floors, row-by-row
//! readers) runs here as before. A worker resolves the same paths and object-store URLs the
//! coordinator names: a shared folder, or a store both reach with the same environment.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use datafusion::execution::SessionStateBuilder;
use datafusion::execution::context::{SessionConfig, SessionContext};
use datafusion::execution::runtime_env::RuntimeEnv;
use url::Url;

use crate::error::{Error, Result};

/// What a worker must report to take part: the wai version, since plans name wai's functions
/// and are encoded by the `datafusion-proto` of this build.
pub const VERSION: &str = concat!("wai ", env!("CARGO_PKG_VERSION"));

/// The bytes of Parquet one task scans when a command does not say: `datafusion-distributed`'s
/// own default. Smaller spreads a smaller input over more workers.
pub const DEFAULT_SPLIT_BYTES: u64 = 16 << 20;

/// How long a worker may take to answer the version question before the command gives up.
const ANSWER_WITHIN: Duration = Duration::from_secs(10);

/// The workers a command runs its plans on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cluster {
    /// The workers' URLs (`http://HOST:PORT`), in the order given.
    pub urls: Vec<Url>,
    /// The bytes of Parquet one task scans.
    pub split_bytes: u64,
}

impl Cluster {
    /// The cluster `specs` name (URLs, each possibly a comma-separated list), or `None` for
    /// none. Checked before any work: each must be an `http://` URL with a host and no path (no
    /// TLS: workers belong on a private network), and none may repeat.
    ///
    /// # Errors
    /// A usage error naming the bad URL.
    pub fn parse(specs: &[String], split_bytes: u64) -> Result<Option<Self>> {
        let mut urls: Vec<Url> = Vec::new();
        for spec in specs.iter().flat_map(|s| s.split(',')) {
            let spec = spec.trim();
            if spec.is_empty() {
                continue;
            }
            let url = Url::parse(spec)
                .map_err(|e| Error::Usage(format!("--cluster: `{spec}` is not a URL: {e}")))?;
            if url.scheme() == "https" {
                return Err(Error::Usage(format!(
                    "--cluster: `{spec}`: workers speak plain gRPC (no TLS yet); give http://HOST:PORT on a private network, or tunnel it"
                )));
            }
            if url.scheme() != "http" || url.host_str().is_none() {
                return Err(Error::Usage(format!(
                    "--cluster: `{spec}` is not a worker's address; give http://HOST:PORT, as `wai worker` prints it"
                )));
            }
            if !matches!(url.path(), "" | "/") || url.query().is_some() {
                return Err(Error::Usage(format!(
                    "--cluster: `{spec}` has a path; give http://HOST:PORT only"
                )));
            }
            if urls.contains(&url) {
                return Err(Error::Usage(format!("--cluster: `{spec}` is named twice")));
            }
            urls.push(url);
        }
        if split_bytes == 0 {
            return Err(Error::Usage(
                "--cluster-split must be at least 1 byte".into(),
            ));
        }
        Ok((!urls.is_empty()).then_some(Self { urls, split_bytes }))
    }

    /// The workers' URLs as one comma-separated list.
    pub fn names(&self) -> String {
        self.urls
            .iter()
            .map(|u| name(u).to_owned())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// The cluster this process's sessions run on, once a command joined one.
static CURRENT: RwLock<Option<Arc<Cluster>>> = RwLock::new(None);

/// The cluster sessions run on now, if any.
pub fn current() -> Option<Arc<Cluster>> {
    CURRENT
        .read()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone()
}

/// Makes later sessions of this process local again.
fn leave() {
    *CURRENT
        .write()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = None;
}

/// The process's sessions on a cluster until this is dropped (on every path out of a command,
/// an unwinding panic included).
#[must_use = "the cluster is left when this is dropped"]
pub struct Joined(());

impl Drop for Joined {
    fn drop(&mut self) {
        leave();
    }
}

/// Checks that every worker of `cluster` answers and runs this wai ([`VERSION`]), then makes
/// every DataFusion session this process builds run its plans there, until the guard is dropped.
///
/// # Errors
/// A worker that does not answer, or answers with another version: exit 69, naming it.
pub fn join(cluster: &Cluster, runtime: &tokio::runtime::Runtime) -> Result<Joined> {
    if !cfg!(feature = "cluster") {
        return Err(Error::Usage(
            "--cluster: this wai was built without the `cluster` feature".into(),
        ));
    }
    runtime.block_on(check(cluster))?;
    tracing::info!(workers = %cluster.names(), "plans run on the cluster");
    *CURRENT
        .write()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(Arc::new(cluster.clone()));
    Ok(Joined(()))
}

/// A session state over `config` and `runtime`, distributed when a cluster was joined: what
/// `SessionContext::new_with_config_rt` builds, with the distributed planner added.
/// `memory` is what the session's queries may hold (`--memory-limit`): on a cluster the workers
/// hold their part of each query to it too. `None` keeps what `config` says (a stage's scope).
pub fn context(
    config: SessionConfig,
    runtime: Arc<RuntimeEnv>,
    memory: Option<u64>,
) -> Result<SessionContext> {
    let builder = SessionStateBuilder::new()
        .with_config(config)
        .with_runtime_env(runtime)
        .with_default_features();
    let builder = match current() {
        Some(cluster) => distributed(builder, &cluster, memory)?,
        None => builder,
    };
    Ok(SessionContext::new_with_state(builder.build()))
}

/// `ctx` planned on this process alone (the same tables, settings and functions), for a read
/// that needs its rows in file order: a distributed scan deals a file's ranges out to tasks and
/// returns them in no fixed order. `ctx` itself when it is not a distributed session (told by
/// its own settings, not by the process's cluster, which another command may have changed).
pub fn here(ctx: &SessionContext) -> SessionContext {
    if !imp::is_distributed(&ctx.state()) {
        return ctx.clone();
    }
    let state = SessionStateBuilder::new_from_existing(ctx.state())
        .with_query_planner(Arc::new(Here))
        .build();
    SessionContext::new_with_state(state)
}

/// DataFusion's own physical planner: what a session has before the distributed one wraps it.
#[derive(Debug)]
struct Here;

#[async_trait::async_trait]
impl datafusion::execution::context::QueryPlanner for Here {
    async fn create_physical_plan(
        &self,
        plan: &datafusion::logical_expr::LogicalPlan,
        state: &dyn datafusion::catalog::Session,
    ) -> datafusion::error::Result<Arc<dyn datafusion::physical_plan::ExecutionPlan>> {
        use datafusion::physical_planner::PhysicalPlanner as _;
        datafusion::physical_planner::DefaultPhysicalPlanner::default()
            .create_physical_plan(plan, state)
            .await
    }
}

/// Whether a worker of the cluster answers the version question, and with what.
async fn version_of(url: &Url) -> std::result::Result<String, String> {
    imp::version_of(url).await
}

/// Asks every worker for its version, all at once.
async fn check(cluster: &Cluster) -> Result<()> {
    let answers = versions(cluster, ANSWER_WITHIN).await;
    for (url, answer) in cluster.urls.iter().zip(answers) {
        let name = name(url);
        match answer {
            Ok(v) if v == VERSION => {}
            Ok(v) => {
                return Err(Error::Unavailable(format!(
                    "worker {name} runs {}, this is {VERSION}: plans are only sent to workers of the same version (upgrade the worker, or leave it out of --cluster)",
                    if v.is_empty() {
                        "an unknown version"
                    } else {
                        v.as_str()
                    }
                )));
            }
            Err(why) => {
                return Err(Error::Unavailable(format!(
                    "worker {name} does not answer: {why}"
                )));
            }
        }
    }
    Ok(())
}

/// After a query failed on the cluster: the workers that no longer answer, to name in the error
/// (a worker that died mid-query leaves only a broken stream behind).
pub async fn silent_workers(cluster: &Cluster) -> Vec<String> {
    let answers = versions(cluster, Duration::from_secs(5)).await;
    cluster
        .urls
        .iter()
        .zip(answers)
        .filter(|(_, answer)| answer.is_err())
        .map(|(url, _)| name(url).to_owned())
        .collect()
}

/// Every worker's answer to the version question, asked of all at once, each within `within`.
async fn versions(cluster: &Cluster, within: Duration) -> Vec<std::result::Result<String, String>> {
    futures::future::join_all(cluster.urls.iter().map(|url| async move {
        tokio::time::timeout(within, version_of(url))
            .await
            .unwrap_or_else(|_| Err(format!("no answer within {} s", within.as_secs())))
    }))
    .await
}

/// A worker as messages name it: its URL without the trailing slash.
fn name(url: &Url) -> &str {
    url.as_str().trim_end_matches('/')
}

/// Turns a failure of a command on a cluster into one that says what the cluster did: a broken
/// connection names the workers gone silent; an error a worker raised that would otherwise read
/// as a bug of wai's (exit 70: it came back as the engine's generic error) is the worker's
/// failure, exit 69. Any other error is left as it is.
pub async fn explain(cluster: &Cluster, error: Error) -> Error {
    let text = error.to_string();
    let broken = [
        "transport error",
        "Error connecting",
        "h2 protocol error",
        "connection reset",
        "Connection refused",
        "broken pipe",
    ]
    .iter()
    .any(|needle| text.to_lowercase().contains(&needle.to_lowercase()));
    if broken {
        let silent = silent_workers(cluster).await;
        if !silent.is_empty() {
            return Error::Unavailable(format!(
                "worker {} stopped answering during the query (run again without it in --cluster): {error}",
                silent.join(", worker ")
            ));
        }
    }
    if broken || error.exit_status() == crate::error::ExitStatus::Internal {
        return Error::Unavailable(format!(
            "the cluster could not run the query ({}): {error}",
            cluster.names()
        ));
    }
    error
}

fn distributed(
    builder: SessionStateBuilder,
    cluster: &Cluster,
    memory: Option<u64>,
) -> Result<SessionStateBuilder> {
    imp::distributed(builder, cluster, memory)
}

/// The worker side: `wai worker`.
pub mod worker {
    pub use super::imp::{Serve, serve};
}

#[cfg(feature = "cluster")]
mod imp {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};

    use async_trait::async_trait;
    use datafusion::error::DataFusionError;
    use datafusion::execution::SessionState;
    use datafusion::execution::SessionStateBuilder;
    use datafusion::execution::context::SessionContext;
    use datafusion::execution::object_store::{DefaultObjectStoreRegistry, ObjectStoreRegistry};
    use datafusion::execution::runtime_env::RuntimeEnvBuilder;
    use datafusion_distributed::{
        ChannelResolver, DistributedExt, GetWorkerInfoRequest, SessionStateBuilderExt, Worker,
        WorkerChannel, WorkerQueryContext, WorkerResolver, WorkerSessionBuilder, grpc,
    };
    use object_store::ObjectStore;
    use url::Url;

    use super::{Cluster, VERSION};
    use crate::error::{Error, Result};
    use crate::pipeline::collect::log_event;

    /// Connections to the workers, one per address for the whole process (the engine's own
    /// keeps one per runtime, and every wai session has its own runtime), with HTTP/2 keepalive so
    /// that a worker whose host is lost fails the query within half a minute instead of leaving
    /// it waiting.
    #[derive(Clone, Copy, Default)]
    struct Channels;

    static CHANNELS: std::sync::LazyLock<
        std::sync::Mutex<std::collections::HashMap<Url, grpc::BoxCloneSyncChannel>>,
    > = std::sync::LazyLock::new(Default::default);

    #[async_trait]
    impl ChannelResolver for Channels {
        async fn get_worker_client_for_url(
            &self,
            url: &Url,
        ) -> std::result::Result<Box<dyn WorkerChannel>, DataFusionError> {
            let mut open = CHANNELS
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let channel = if let Some(channel) = open.get(url) {
                channel.clone()
            } else {
                let endpoint = tonic::transport::Endpoint::from_shared(url.to_string())
                    .map_err(|e| DataFusionError::Configuration(format!("worker `{url}`: {e}")))?
                    .connect_timeout(std::time::Duration::from_secs(10))
                    .tcp_nodelay(true)
                    .http2_keep_alive_interval(std::time::Duration::from_secs(10))
                    .keep_alive_timeout(std::time::Duration::from_secs(20))
                    .keep_alive_while_idle(true);
                let channel = grpc::BoxCloneSyncChannel::new(endpoint.connect_lazy());
                open.insert(url.clone(), channel.clone());
                channel
            };
            Ok(grpc::create_worker_client(channel))
        }
    }

    /// The workers of a [`Cluster`], as the planner asks for them.
    struct Fixed(Vec<Url>);

    impl WorkerResolver for Fixed {
        fn get_urls(&self) -> std::result::Result<Vec<Url>, DataFusionError> {
            Ok(self.0.clone())
        }
    }

    datafusion::common::extensions_options! {
        /// What a coordinator's session may hold, sent with every plan fragment (gRPC metadata)
        /// so that its worker holds the fragment to the same bound.
        pub struct Limits {
            /// Bytes a query may hold (`--memory-limit`); 0 for the worker's own default.
            pub memory: u64, default = 0
        }
    }

    impl datafusion::config::ConfigExtension for Limits {
        const PREFIX: &'static str = "wai";
    }

    pub(super) fn distributed(
        mut builder: SessionStateBuilder,
        cluster: &Cluster,
        memory: Option<u64>,
    ) -> Result<SessionStateBuilder> {
        if let Some(memory) = memory {
            builder = builder.with_distributed_option_extension(Limits { memory });
        }
        Ok(builder
            .with_distributed_planner()
            .with_distributed_worker_resolver(Fixed(cluster.urls.clone()))
            .with_distributed_channel_resolver(Channels)
            .with_distributed_file_scan_config_bytes_per_partition(
                usize::try_from(cluster.split_bytes).unwrap_or(usize::MAX),
            )?)
    }

    /// Whether `state` plans with the distributed planner (its settings carry the engine's).
    pub(super) fn is_distributed(state: &SessionState) -> bool {
        datafusion_distributed::DistributedConfig::from_session_config(state.config()).is_ok()
    }

    pub(super) async fn version_of(url: &Url) -> std::result::Result<String, String> {
        let resolver = grpc::DefaultChannelResolver::default();
        let channel = resolver
            .get_channel(url)
            .await
            .map_err(|e| first_line(&e.to_string()))?;
        let mut client = grpc::create_worker_client(channel);
        client
            .get_worker_info(GetWorkerInfoRequest {})
            .await
            .map(|r| r.version)
            .map_err(|e| first_line(&e.to_string()))
    }

    fn first_line(text: &str) -> String {
        text.lines().next().unwrap_or_default().to_owned()
    }

    /// Object stores as a worker finds them: the ones registered, else one built from the URL
    /// and this process's environment (as the coordinator built its own), kept for next time.
    #[derive(Debug, Default)]
    struct FromEnvironment(DefaultObjectStoreRegistry);

    impl ObjectStoreRegistry for FromEnvironment {
        fn register_store(
            &self,
            url: &Url,
            store: Arc<dyn ObjectStore>,
        ) -> Option<Arc<dyn ObjectStore>> {
            self.0.register_store(url, store)
        }

        fn deregister_store(&self, url: &Url) -> datafusion::error::Result<Arc<dyn ObjectStore>> {
            self.0.deregister_store(url)
        }

        fn get_store(&self, url: &Url) -> datafusion::error::Result<Arc<dyn ObjectStore>> {
            if let Ok(store) = self.0.get_store(url) {
                return Ok(store);
            }
            let (store, root) = crate::pipeline::source::store_for(url)
                .map_err(|e| DataFusionError::External(Box::new(e)))?;
            self.0.register_store(&root, Arc::clone(&store));
            Ok(store)
        }
    }

    /// How a worker builds the session each plan fragment runs in: wai's functions registered
    /// (the JSON functions, ours, the guarded ones), as the coordinator's sessions have them.
    #[derive(Clone)]
    struct WaiSession {
        /// Fragments taken so far.
        taken: Arc<AtomicU64>,
        /// Where the worker finds object stores (shared by every query's memory-bounded runtime).
        stores: Arc<FromEnvironment>,
        /// Testing: end the process at the first fragment, as a worker that dies mid-query.
        die_on_task: bool,
    }

    #[async_trait]
    impl WorkerSessionBuilder for WaiSession {
        async fn build_session_state(
            &self,
            ctx: WorkerQueryContext,
        ) -> std::result::Result<SessionState, DataFusionError> {
            if self.die_on_task {
                log_event("dying", &serde_json::json!({"why": "--die-on-task"}));
                std::process::abort();
            }
            let mut builder = ctx.builder;
            builder.set_distributed_option_extension_from_headers::<Limits>(&ctx.headers)?;
            let memory = builder
                .config()
                .get_or_insert_default()
                .options()
                .extensions
                .get::<Limits>()
                .map_or(0, |l| l.memory);
            // The coordinator's bound, or this worker's own default when none came.
            let memory = if memory == 0 {
                crate::pipeline::limits::default_memory()
            } else {
                memory
            };
            let n = self.taken.fetch_add(1, Ordering::Relaxed) + 1;
            log_event("task", &serde_json::json!({ "n": n, "memory": memory }));
            // The fragment's operators are held to it as the coordinator's are (nothing spills,
            // as there: see `session::limited_context`).
            let runtime = RuntimeEnvBuilder::new()
                .with_object_store_registry(Arc::clone(&self.stores) as _)
                .with_memory_limit(usize::try_from(memory).unwrap_or(usize::MAX), 1.0)
                .with_disk_manager_builder(
                    datafusion::execution::disk_manager::DiskManagerBuilder::default()
                        .with_mode(datafusion::execution::disk_manager::DiskManagerMode::Disabled),
                )
                .build_arc()?;
            // A worker reading another's shuffle output connects as the coordinator does.
            let mut context = SessionContext::new_with_state(
                builder
                    .with_runtime_env(runtime)
                    .with_distributed_channel_resolver(Channels)
                    .build(),
            );
            crate::pipeline::session::register_functions(&mut context, memory)
                .map_err(|e| DataFusionError::External(Box::new(e)))?;
            Ok(context.state())
        }
    }

    /// What `wai worker` is told.
    pub struct Serve {
        /// Where to listen (`HOST:PORT`; port 0 takes a free one).
        pub listen: String,
        /// The version to report instead of this wai's (testing a mismatch).
        pub report_version: Option<String>,
        /// Testing: end the process at the first plan fragment.
        pub die_on_task: bool,
    }

    /// Serves plan fragments on `how.listen` until SIGTERM or SIGINT; logs JSON lines on stderr
    /// (`listening` with the address, `task` per fragment, `stopping`). Returns the address it
    /// listened on and the fragments it took.
    ///
    /// # Errors
    /// The address cannot be listened on.
    pub fn serve(runtime: &tokio::runtime::Runtime, how: &Serve) -> Result<(String, u64)> {
        runtime.block_on(async {
            let listener = tokio::net::TcpListener::bind(how.listen.as_str())
                .await
                .map_err(|e| Error::Io {
                    path: how.listen.clone().into(),
                    source: e,
                })?;
            let bound = listener.local_addr().map_err(|e| Error::Io {
                path: how.listen.clone().into(),
                source: e,
            })?;
            let taken = Arc::new(AtomicU64::new(0));
            let stores = Arc::new(FromEnvironment::default());
            let runtime_env = RuntimeEnvBuilder::new()
                .with_object_store_registry(Arc::clone(&stores) as _)
                .build_arc()?;
            let worker = Worker::from_session_builder(WaiSession {
                taken: Arc::clone(&taken),
                stores,
                die_on_task: how.die_on_task,
            })
            .with_runtime_env(runtime_env)
            .with_version(how.report_version.clone().unwrap_or_else(|| VERSION.into()));
            // The handlers are in place before anyone is told where to connect: a SIGTERM right
            // after the `listening` line stops the worker cleanly.
            let signal = |kind| {
                tokio::signal::unix::signal(kind).map_err(|e| {
                    Error::Internal(format!("cannot take the worker's signals: {e}"))
                })
            };
            let mut term = signal(tokio::signal::unix::SignalKind::terminate())?;
            let mut interrupt = signal(tokio::signal::unix::SignalKind::interrupt())?;
            log_event(
                "listening",
                &serde_json::json!({"address": format!("http://{bound}"), "version": worker.version()}),
            );
            let until = async move {
                let why = tokio::select! {
                    _ = term.recv() => "SIGTERM",
                    _ = interrupt.recv() => "SIGINT",
                };
                log_event("stopping", &serde_json::json!({ "why": why }));
            };
            tonic::transport::Server::builder()
                .add_service(worker.into_worker_server())
                .serve_with_incoming_shutdown(
                    tokio_stream::wrappers::TcpListenerStream::new(listener),
                    until,
                )
                .await
                .map_err(|e| Error::Internal(format!("the worker's server failed: {e}")))?;
            Ok((format!("http://{bound}"), taken.load(Ordering::Relaxed)))
        })
    }
}

/// Built without the `cluster` feature: every use says so.
#[cfg(not(feature = "cluster"))]
mod imp {
    use datafusion::execution::SessionStateBuilder;
    use url::Url;

    use super::Cluster;
    use crate::error::{Error, Result};

    fn missing() -> Error {
        Error::Usage("this wai was built without the `cluster` feature".into())
    }

    pub(super) fn distributed(
        _builder: SessionStateBuilder,
        _cluster: &Cluster,
        _memory: Option<u64>,
    ) -> Result<SessionStateBuilder> {
        Err(missing())
    }

    pub(super) async fn version_of(_url: &Url) -> std::result::Result<String, String> {
        Err(missing().to_string())
    }

    pub(super) fn is_distributed(_state: &datafusion::execution::SessionState) -> bool {
        false
    }

    /// What `wai worker` is told.
    pub struct Serve {
        /// Where to listen.
        pub listen: String,
        /// The version to report instead of this wai's.
        pub report_version: Option<String>,
        /// End the process at the first plan fragment.
        pub die_on_task: bool,
    }

    /// Refuses: no worker in this build.
    ///
    /// # Errors
    /// Always.
    pub fn serve(_runtime: &tokio::runtime::Runtime, _how: &Serve) -> Result<(String, u64)> {
        Err(missing())
    }
}

#[cfg(all(test, feature = "cluster"))]
mod tests {
    use super::*;

    #[test]
    fn urls_are_checked_and_named_once() {
        let two = Cluster::parse(
            &["http://10.0.0.1:7070, http://10.0.0.2:7070".into()],
            DEFAULT_SPLIT_BYTES,
        )
        .expect("test")
        .expect("test");
        assert_eq!(two.names(), "http://10.0.0.1:7070, http://10.0.0.2:7070");
        assert_eq!(Cluster::parse(&[], 1).expect("test"), None);
        for bad in [
            "https://h:1",
            "h:1",
            "http://h:1/x",
            "http://h:1,http://h:1",
        ] {
            assert!(Cluster::parse(&[bad.into()], 1).is_err(), "{bad}");
        }
        assert!(Cluster::parse(&["http://h:1".into()], 0).is_err());
    }

    /// The plan of a grouped query over a file of three row groups, as `ctx` makes it.
    async fn plan_of(ctx: &SessionContext, dir: &std::path::Path) -> String {
        use datafusion::arrow::array::{Int64Array, RecordBatch};
        use datafusion::arrow::datatypes::{DataType, Field, Schema};
        let path = dir.join("n.parquet");
        if !path.exists() {
            let schema = Arc::new(Schema::new(vec![Field::new("n", DataType::Int64, false)]));
            let props = datafusion::parquet::file::properties::WriterProperties::builder()
                .set_max_row_group_row_count(Some(100))
                .build();
            let file = std::fs::File::create(&path).expect("test");
            let mut w = datafusion::parquet::arrow::ArrowWriter::try_new(
                file,
                Arc::clone(&schema),
                Some(props),
            )
            .expect("test");
            let batch =
                RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from_iter_values(0..300))])
                    .expect("test");
            w.write(&batch).expect("test");
            w.close().expect("test");
        }
        // `here` shares its session's tables: registered once.
        if !ctx.table_exist("t").expect("test") {
            ctx.register_parquet(
                "t",
                path.to_str().expect("test"),
                datafusion::prelude::ParquetReadOptions::default(),
            )
            .await
            .expect("test");
        }
        let plan = ctx
            .sql("SELECT n % 7 AS k, count(*) FROM t GROUP BY n % 7")
            .await
            .expect("test")
            .create_physical_plan()
            .await
            .expect("test");
        datafusion::physical_plan::displayable(plan.as_ref())
            .indent(true)
            .to_string()
    }

    #[tokio::test]
    async fn here_plans_a_distributed_session_locally_and_leaves_a_local_one_alone() {
        let dir = tempfile::tempdir().expect("test");
        let cluster = Cluster::parse(&["http://127.0.0.1:9,http://127.0.0.1:10".into()], 1)
            .expect("test")
            .expect("test");
        let builder = SessionStateBuilder::new()
            .with_config(SessionConfig::new().with_target_partitions(2))
            .with_default_features();
        let distributed = SessionContext::new_with_state(
            imp::distributed(builder, &cluster, Some(1 << 30))
                .expect("test")
                .build(),
        );
        let far = plan_of(&distributed, dir.path()).await;
        assert!(far.contains("Network"), "not distributed: {far}");
        let near = plan_of(&here(&distributed), dir.path()).await;
        assert!(!near.contains("Network"), "still distributed: {near}");
        let local = SessionContext::new();
        let plain = plan_of(&here(&local), dir.path()).await;
        assert!(!plain.contains("Network"), "{plain}");
    }
}
