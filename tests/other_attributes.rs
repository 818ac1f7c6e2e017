//! `#[gpu_scope]` beside another attribute macro that rewrites the function, in either order:
//! `tracing::instrument` (sync and async, which wraps the body in an instrumented future).
use gpu_scope::gpu_scope;
use tch::{Device, Kind, Tensor};

#[tracing::instrument]
#[gpu_scope(on_escape = error)]
fn a(x: &Tensor) -> Result<Tensor, gpu_scope::Error> {
    Ok(x * 2)
}

#[gpu_scope(on_escape = error)]
#[tracing::instrument]
fn b(x: &Tensor) -> Result<Tensor, gpu_scope::Error> {
    Ok(x * 2)
}

#[tracing::instrument(skip(x))]
#[gpu_scope(on_escape = error)]
async fn c(x: &Tensor) -> Result<Tensor, gpu_scope::Error> {
    tokio::task::yield_now().await;
    Ok(x * 2)
}

#[gpu_scope(on_escape = error)]
#[tracing::instrument(skip(x))]
async fn d(x: &Tensor) -> Result<Tensor, gpu_scope::Error> {
    tokio::task::yield_now().await;
    Ok(x * 2)
}

static SINK: std::sync::Mutex<Vec<Tensor>> = std::sync::Mutex::new(Vec::new());

#[gpu_scope(on_escape = error)]
#[tracing::instrument(skip(x))]
async fn leak_d(x: &Tensor) -> Result<(), gpu_scope::Error> {
    tokio::task::yield_now().await;
    SINK.lock().unwrap().push(x * 2);
    Ok(())
}

#[tracing::instrument(skip(x), err)]
#[gpu_scope(on_escape = error)]
async fn leak_c(x: &Tensor) -> Result<(), gpu_scope::Error> {
    tokio::task::yield_now().await;
    SINK.lock().unwrap().push(x * 2);
    Ok(())
}

#[test]
fn instrument_above_or_below() {
    let x = Tensor::ones([4], (Kind::Float, Device::Cpu));
    let _ = a(&x).unwrap();
    assert!(gpu_scope::last_report().unwrap().is_clean());
    let _ = b(&x).unwrap();
    assert!(gpu_scope::last_report().unwrap().is_clean());
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    rt.block_on(async {
        let _ = c(&x).await.unwrap();
        let r = gpu_scope::last_report().unwrap();
        assert!(r.is_clean() && r.kept == 16, "{r}");
        let _ = d(&x).await.unwrap();
        let r = gpu_scope::last_report().unwrap();
        assert!(r.is_clean() && r.kept == 16, "{r}");
        assert!(leak_d(&x).await.is_err());
        assert_eq!(gpu_scope::last_report().unwrap().escaped_bytes, 16);
        assert!(leak_c(&x).await.is_err());
        assert_eq!(gpu_scope::last_report().unwrap().escaped_bytes, 16);
    });
    SINK.lock().unwrap().clear();
}
