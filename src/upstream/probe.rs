//! Active health probes: `GET {mirror}/{probe_path}` for every mirror of a
//! remote's index set every `probe_interval`, for remotes that set
//! `health.probe_path`.

use std::sync::Weak;

use super::fetch::record_failure;
use super::Remote;

/// Active health probes: `GET {mirror}/{probe_path}` for every mirror of the
/// remote's index set every `probe_interval`, until the remote is dropped (by a reload).
pub async fn probe_loop(remote: Weak<Remote>) {
    loop {
        let interval = match remote.upgrade() {
            Some(r) => r.config.health.probe_interval,
            None => return,
        };
        tokio::time::sleep(interval).await;
        let Some(remote) = remote.upgrade() else {
            return;
        };
        let Some(probe_path) = remote.config.health.probe_path.clone() else {
            return;
        };
        let set = &remote.index;
        for (idx, mirror) in set.mirrors.iter().enumerate() {
            let request =
                remote.authorize(remote.client().get(mirror.url_for(&probe_path)), set, idx);
            match tokio::time::timeout(remote.config.first_byte_timeout, request.send()).await {
                Ok(Ok(response)) if !response.status().is_server_error() => {
                    set.health[idx].record_success()
                }
                Ok(Ok(response)) => record_failure(
                    &remote,
                    set,
                    idx,
                    &format_args!("probe answered {}", response.status()),
                ),
                Ok(Err(e)) => record_failure(
                    &remote,
                    set,
                    idx,
                    &format_args!("probe failed: {}", e.without_url()),
                ),
                Err(_) => record_failure(&remote, set, idx, &"probe timed out"),
            }
        }
    }
}
