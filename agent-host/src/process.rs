//! What every agent binary does the same way: logs on stderr (plain when it is not a
//! terminal, `RUST_LOG` to filter, `info` by default), and shutdown on Ctrl-C or SIGTERM
//! through one cancellation token.

use tokio_util::sync::CancellationToken;

/// Installs the log subscriber. Call once, first thing in `main`.
pub fn init_logging() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
}

/// Returns at the first Ctrl-C or SIGTERM.
pub async fn interrupted() {
    #[cfg(unix)]
    if let Ok(mut term) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
    {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
        return;
    }
    let _ = tokio::signal::ctrl_c().await;
}

/// Cancels `shutdown` at the first Ctrl-C or SIGTERM (spawn it).
pub async fn shutdown_on_signal(shutdown: CancellationToken) {
    interrupted().await;
    shutdown.cancel();
}
