//! The tickets for replicas, the guide's part 2: `tickets --http ADDR --redis URL --public-url URL
//! --oauth-jwks FILE --oauth-issuer URL` runs one replica of several behind a load balancer, all
//! on one Redis, signing people in with OAuth access tokens, with the approval inbox, Prometheus
//! metrics and the operator log.
//!
//! The guide quotes this file between its `// guide:` markers.

use std::sync::Arc;

use agent_surface::ServiceBuilder;
use agent_surface::core::DefinitionError;
use agent_surface::oauth::{Jwks, ResourceServer, ResourceServerConfig};
use agent_surface::redis::{RedisConfig, RedisStores};
use metrics_exporter_prometheus::PrometheusBuilder;

use crate::{Service, assemble};

/// How a replica is started, for the usage message.
pub const USAGE: &str = "tickets --http ADDR --redis URL [--redis-prefix PREFIX] --public-url URL \
                         --oauth-jwks FILE --oauth-issuer URL [--oauth-issuer URL]…";

/// The upper bounds of the call-duration histogram's buckets, in seconds.
const BUCKETS: [f64; 12] = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5];

/// A replica's settings, from its command line.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Options {
    /// The Redis every replica shares (`--redis URL`).
    pub redis: String,
    /// The prefix of the service's keys in it (`--redis-prefix`, default `tickets:`).
    pub redis_prefix: String,
    /// Where people and agents reach the service, through the load balancer (`--public-url`).
    pub public_url: String,
    /// The file holding the authorization server's signing keys, a JWKS (`--oauth-jwks`).
    pub jwks: String,
    /// The issuers whose access tokens are accepted (`--oauth-issuer`, repeatable).
    pub issuers: Vec<String>,
}

impl Options {
    /// The options after `--http ADDR`; every one but `--redis-prefix` is required.
    pub fn parse(args: &[&str]) -> Result<Options, String> {
        let (mut redis, mut redis_prefix, mut public_url, mut jwks, mut issuers) = (None, None, None, None, Vec::new());
        let mut args = args.iter();
        while let Some(&name) = args.next() {
            let value = args.next().map(|v| v.to_string()).ok_or_else(|| format!("{name} needs a value"))?;
            match name {
                "--redis" => redis = Some(value),
                "--redis-prefix" => redis_prefix = Some(value),
                "--public-url" => public_url = Some(value.trim_end_matches('/').to_string()),
                "--oauth-jwks" => jwks = Some(value),
                "--oauth-issuer" => issuers.push(value),
                other => return Err(format!("unknown option {other}; usage: {USAGE}")),
            }
        }
        let missing = |what: &str| format!("{what} is required; usage: {USAGE}");
        if issuers.is_empty() {
            return Err(missing("--oauth-issuer"));
        }
        Ok(Options {
            redis: redis.ok_or_else(|| missing("--redis"))?,
            redis_prefix: redis_prefix.unwrap_or_else(|| "tickets:".to_string()),
            public_url: public_url.ok_or_else(|| missing("--public-url"))?,
            jwks: jwks.ok_or_else(|| missing("--oauth-jwks"))?,
            issuers,
        })
    }
}

// guide:begin production-service
/// The tickets for replicas: their idempotency records and natural keys, confirmations, quotas
/// and MCP tasks in `redis` (one bundle: never half there, half in memory), the audit trail
/// there too (each replica's inbox shows every decision), agents sent to the inbox under
/// `public_url`. (The pipeline records its metrics by default, through the recorder `serve`
/// installs.)
pub fn service(redis: &RedisStores, public_url: &str) -> Result<Service, DefinitionError> {
    let builder = ServiceBuilder::new()
        .stores(redis.bundle())
        .audit(Arc::new(redis.audit()))
        // Approvals at {public_url}/inbox/c/{id}.
        .public_url(public_url);
    assemble(builder) // the policies, the quota and the capabilities of part 1
}
// guide:end production-service

// guide:begin production-replica
/// Runs one replica on `addr` until SIGTERM or Ctrl-C, then drains.
#[expect(clippy::print_stdout, reason = "the replica says where it listens, the one line it prints")]
pub async fn replica(addr: &str, options: &Options) -> Result<(), String> {
    // Histograms with buckets, so that a scraper can add up the replicas.
    let buckets = PrometheusBuilder::new().set_buckets(&BUCKETS).map_err(|e| e.to_string())?;
    let prometheus = buckets.install_recorder().map_err(|e| e.to_string())?;
    let config = RedisConfig::with_prefix(&options.redis_prefix);
    let redis = RedisStores::connect(&options.redis, config).await.map_err(|e| e.to_string())?;
    let service = service(&redis, &options.public_url).map_err(|e| e.to_string())?;

    // Access tokens from your authorization server, for this service (`aud`: the public URL).
    let oauth = Arc::new(
        ResourceServer::new(ResourceServerConfig {
            resource: options.public_url.clone(),
            authorization_servers: options.issuers.clone(),
            jwks: Jwks::from_file(&options.jwks).map_err(|e| format!("--oauth-jwks: {e}"))?,
            ..Default::default()
        })
        .map_err(|e| format!("--oauth-*: {e}"))?,
    );
    let serve = service
        .serve()
        .authenticator(oauth.clone()) // on /mcp, /api and /inbox alike
        .approvers("approver") // the inbox, for identities with this role
        .metrics(move || prometheus.render()) // GET /api/metrics
        .merge(oauth.metadata_router()); // where clients learn which server issues tokens
    // The key that seals MCP approval rounds is kept in Redis beside the approvals, the same for
    // every replica. To keep it in your secret store instead: `.state_key(key)`, on every replica.
    // Said once SIGTERM drains (ADDR may use port 0: the address is the one the system chose).
    let ready = |local| println!("listening on http://{local}");
    serve.on_listening(ready).http(addr).await.map_err(|e| e.to_string())
}
// guide:end production-replica

#[cfg(test)]
mod tests {
    use super::Options;

    #[test]
    fn a_replica_needs_redis_a_public_url_and_oauth() {
        let all = ["--redis", "redis://r", "--public-url", "https://t.example/", "--oauth-jwks", "k.json"];
        let issuer = ["--oauth-issuer", "https://id.example"];
        let options = Options::parse(&[&all[..], &issuer[..]].concat()).expect("complete");
        assert_eq!((options.redis_prefix.as_str(), options.public_url.as_str()), ("tickets:", "https://t.example"));
        let without_issuer = Options::parse(&all).expect_err("no issuer");
        assert!(without_issuer.starts_with("--oauth-issuer is required"), "{without_issuer}");
        let without_redis = Options::parse(&[&all[2..], &issuer[..]].concat()).expect_err("no Redis");
        assert!(without_redis.starts_with("--redis is required"), "{without_redis}");
        let unknown = Options::parse(&["--token", "x"]).expect_err("an unknown option");
        assert!(unknown.starts_with("unknown option --token"), "{unknown}");
    }
}
