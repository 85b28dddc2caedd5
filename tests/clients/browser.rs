//! The dashboard in a real browser: Debian's headless Chromium loads `/-/`
//! while a slow fill runs, its rendered DOM (`--dump-dom`, after the inline
//! script ran) names the remotes, shows the fill's progress bar and the
//! quarantine's refusals, and its screenshot is not blank. With `MIRRORCACHE_SCREENSHOT=PATH` the
//! screenshot is also copied there (how `docs/dashboard.png` is made).

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use scraper::{Html, Selector};

use crate::support::osv::{feed_status, malicious, osv_zip};
use crate::support::proxy::get_json;
use crate::support::{available, test_bytes, wait_until, Fault, MirrorServer, TestProxy};
use crate::{run, version};

const CHROMIUM: &str = "chromium-headless-shell";

/// Runs the browser on `url` with `args`, within a minute.
fn browse(profile: &Path, args: &[&str], url: &str) -> String {
    run(Command::new("timeout")
        .arg("60")
        .arg(CHROMIUM)
        // Root (as CI runs) needs --no-sandbox; no GPU in a container.
        .args(["--no-sandbox", "--disable-gpu", "--hide-scrollbars"])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg("--window-size=1100,900")
        .args(args)
        .arg(url))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_renders_in_a_browser_during_a_slow_fill() {
    // Installed by .ci/tools.sh (Debian's chromium-headless-shell).
    if !available(CHROMIUM, version(CHROMIUM, "--version").is_some()) {
        return;
    }
    let (npm, pypi) = (MirrorServer::start().await, MirrorServer::start().await);
    npm.put("/m/left-pad/-/left-pad-1.3.0.tgz", test_bytes(40_000, 1));
    npm.put("/m/big/-/big-1.0.0.tgz", test_bytes(4 << 20, 2));
    npm.put(
        "/osv/all.zip",
        osv_zip(&[malicious("MAL-2025-47040", "npm", "mc-worm", &["1.0.1"])]),
    );
    let proxy = TestProxy::start(&format!(
        "[[advisories]]\nname = \"osv\"\nurls = [\"{}\"]\n\n\
         [[remote]]\nname = \"npm\"\nkind = \"npm\"\nmirrors = [\"{}\"]\nquarantine = [\"malicious\"]\n\n\
         [[remote]]\nname = \"pypi\"\nkind = \"pypi\"\nmirrors = [\"{}\", \"{}\"]\n",
        npm.url("/osv/all.zip"),
        npm.url("/m"),
        pypi.url("/a"),
        pypi.url("/b"),
    ))
    .await;
    let client = reqwest::Client::new();
    feed_status(&proxy.base, "osv", |f| f["report"]["records"] == 1).await;
    let refused = proxy.url("/npm/mc-worm/-/mc-worm-1.0.1.tgz");
    assert_eq!(crate::support::proxy::get(&client, &refused).await.0, 403);
    for _ in 0..3 {
        crate::support::proxy::get(&client, &proxy.url("/npm/left-pad/-/left-pad-1.3.0.tgz"))
            .await
            .2
            .unwrap();
        proxy.settle().await;
    }
    npm.set_fault(Fault::SlowBody(Duration::from_millis(200)));
    let download = tokio::spawn({
        let (client, url) = (client.clone(), proxy.url("/npm/big/-/big-1.0.0.tgz"));
        async move {
            crate::support::proxy::get(&client, &url)
                .await
                .2
                .map(|b| b.len())
        }
    });
    wait_until("the fill to have written something", async || {
        let status = get_json(&client, &proxy.url("/-/status")).await;
        status["fills"][0]["written"].as_u64().unwrap_or(0) > 0
    })
    .await;

    let work = tempfile::tempdir().unwrap();
    let url = proxy.url("/-/");
    let dom =
        tokio::task::block_in_place(|| browse(&work.path().join("p1"), &["--dump-dom"], &url));
    let html = Html::parse_document(&dom);
    let names: Vec<String> = html
        .select(&Selector::parse("tr[data-remote] td.name").unwrap())
        .map(|e| e.text().collect())
        .collect();
    // The advisory feed's own remote is listed too: its fetches and its
    // URLs' health show as any remote's do.
    assert_eq!(names, ["advisories.osv", "npm", "pypi"], "{dom}");
    let bar = Selector::parse("#fills-body tr.fill progress").unwrap();
    let bar = html
        .select(&bar)
        .next()
        .unwrap_or_else(|| panic!("no fill in {dom}"));
    assert_eq!(bar.value().attr("max"), Some("4194304"));
    assert!(dom.contains("npm/big/-/big-1.0.0.tgz"), "{dom}");
    let refusal: Vec<String> = html
        .select(&Selector::parse("#quarantine-body tr td").unwrap())
        .take(6)
        .map(|e| e.text().collect())
        .collect();
    assert_eq!(
        refusal,
        [
            "npm",
            "mc-worm",
            "1.0.1",
            "MAL-2025-47040",
            "malicious",
            "1"
        ],
        "{dom}"
    );

    let shot = work.path().join("dashboard.png");
    let blank = work.path().join("blank.png");
    tokio::task::block_in_place(|| {
        browse(
            &work.path().join("p2"),
            &[&format!("--screenshot={}", shot.display())],
            &url,
        );
        browse(
            &work.path().join("p3"),
            &[&format!("--screenshot={}", blank.display())],
            "about:blank",
        );
    });
    let (png, blank) = (
        std::fs::read(&shot).unwrap(),
        std::fs::read(&blank).unwrap(),
    );
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"), "not a PNG");
    // No pixel decoder here: a blank page of the same size compresses to a
    // few KiB; text, tables and bars make the image several times larger.
    assert!(
        png.len() > 4 * blank.len(),
        "the screenshot looks blank: {} bytes against {} for about:blank",
        png.len(),
        blank.len()
    );
    if let Ok(keep) = std::env::var("MIRRORCACHE_SCREENSHOT") {
        std::fs::copy(&shot, keep).unwrap();
    }
    println!(
        "CLIENT-REPORT {CHROMIUM}: dashboard screenshot {} bytes",
        png.len()
    );

    npm.set_fault(Fault::None);
    assert_eq!(download.await.unwrap().unwrap(), 4 << 20);
    proxy.stop().await;
}

/// The dashboard with two hours of history and the browse page of a remote
/// holding a hostile path, in the browser: the charts are drawn (SVG paths),
/// the hostile path is text in the DOM after the page's script ran (no
/// element was injected), and both screenshots are not blank. With
/// `MIRRORCACHE_SCREENSHOTS=DIR` they are copied there as
/// `dashboard-history.png` and `browse.png` (how `docs/` gets them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_history_charts_and_the_browse_page_render_and_escape_a_hostile_path() {
    if !available(CHROMIUM, version(CHROMIUM, "--version").is_some()) {
        return;
    }
    let npm = MirrorServer::start().await;
    let hostile = "evil/%3Cimg%20src=x%20onerror=document.title='pwned'%3E%3Cscript%3Edocument.title='pwned'%3C%2Fscript%3E.tgz";
    npm.put(&format!("/m/{hostile}"), test_bytes(5_000, 9));
    for i in 0..40 {
        npm.put(
            &format!("/m/pkg-{i:02}/-/pkg-{i:02}-1.0.0.tgz"),
            test_bytes(20_000 + i * 3_000, i as u64),
        );
    }
    let proxy = TestProxy::start_with_server(
        "admin_token = \"admin-secret\"",
        &format!(
            "[[remote]]\nname = \"npm\"\nkind = \"npm\"\nmirrors = [\"{}\"]\n",
            npm.url("/m")
        ),
    )
    .await;
    let client = reqwest::Client::new();
    // Two hours of traffic, a minute at a time on the history's own clock:
    // a new package now and then (a miss), hits on the ones cached.
    let clock = std::sync::Arc::new(mirrorcache::clock::ManualClock::at(
        mirrorcache::clock::now_ms() - 2 * 3600 * 1000,
    ));
    proxy.running.proxy.history.set_clock(clock.clone());
    for minute in 0..120u64 {
        let cached = (minute / 3).min(39);
        let hits = 2 + (minute * 7 % 11) + if (40..70).contains(&minute) { 12 } else { 0 };
        for n in 0..hits {
            let i = (n * 13 + minute) % (cached + 1);
            let url = proxy.url(&format!("/npm/pkg-{i:02}/-/pkg-{i:02}-1.0.0.tgz"));
            crate::support::proxy::get(&client, &url).await.2.unwrap();
        }
        proxy.settle().await;
        proxy.running.proxy.sample_history();
        clock.advance(Duration::from_secs(60));
    }
    let hostile_url = proxy.url(&format!("/npm/{hostile}"));
    crate::support::proxy::get(&client, &hostile_url)
        .await
        .2
        .unwrap();
    proxy.settle().await;

    let work = tempfile::tempdir().unwrap();
    let dashboard = proxy.url("/-/");
    let browse_url = proxy.url("/-/browse/npm/");
    let (dashboard_dom, browse_dom) = tokio::task::block_in_place(|| {
        (
            browse(&work.path().join("p1"), &["--dump-dom"], &dashboard),
            browse(&work.path().join("p2"), &["--dump-dom"], &browse_url),
        )
    });
    let html = Html::parse_document(&dashboard_dom);
    let paths = Selector::parse(".chart svg path").unwrap();
    let drawn: Vec<&str> = html
        .select(&paths)
        .filter_map(|p| p.value().attr("d"))
        .collect();
    assert_eq!(drawn.len(), 6, "{dashboard_dom}");
    assert!(drawn.iter().all(|d| d.contains('L')), "{drawn:?}");
    let html = Html::parse_document(&browse_dom);
    assert!(
        !browse_dom.contains("pwned</title>"),
        "the hostile path ran: {browse_dom}"
    );
    assert_eq!(html.select(&Selector::parse("img").unwrap()).count(), 0);
    let cells: Vec<String> = html
        .select(&Selector::parse("tr.entry td.path a").unwrap())
        .map(|e| e.text().collect())
        .collect();
    assert!(
        cells.contains(&"evil/<img src=x onerror=document.title='pwned'><script>document.title='pwned'</script>.tgz".to_string()),
        "{cells:?}"
    );
    assert_eq!(cells.len(), 41);
    assert!(!browse_dom.contains("admin-secret"));

    let shots = work.path().join("shots");
    std::fs::create_dir_all(&shots).unwrap();
    let blank = work.path().join("blank.png");
    tokio::task::block_in_place(|| {
        browse(
            &work.path().join("p3"),
            &[
                "--window-size=1100,900",
                &format!(
                    "--screenshot={}",
                    shots.join("dashboard-history.png").display()
                ),
            ],
            &dashboard,
        );
        browse(
            &work.path().join("p4"),
            &[&format!(
                "--screenshot={}",
                shots.join("browse.png").display()
            )],
            &format!("{browse_url}?prefix=pkg-0"),
        );
        browse(
            &work.path().join("p5"),
            &[&format!("--screenshot={}", blank.display())],
            "about:blank",
        );
    });
    let blank = std::fs::read(&blank).unwrap().len();
    for name in ["dashboard-history.png", "browse.png"] {
        let png = std::fs::read(shots.join(name)).unwrap();
        assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"), "{name} is not a PNG");
        assert!(png.len() > 4 * blank, "{name} looks blank");
        if let Ok(dir) = std::env::var("MIRRORCACHE_SCREENSHOTS") {
            std::fs::copy(shots.join(name), Path::new(&dir).join(name)).unwrap();
        }
        println!("CLIENT-REPORT {CHROMIUM}: {name} {} bytes", png.len());
    }
    proxy.stop().await;
}
