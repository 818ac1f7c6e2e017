// An `async fn`'s future stays `Send` when its body's is: the expansion holds nothing
// `!Send` across an `.await`.
use gpu_scope::{gpu_scope, Error, Tensors};
use std::sync::{Arc, Mutex};
use tch::Tensor;

fn assert_send<T: Send>(t: T) -> T {
    t
}

async fn ready() {}

#[derive(Tensors, Default)]
struct Decoder {
    cache: Vec<Tensor>,
}

impl Decoder {
    #[gpu_scope(on_escape = error)]
    async fn step(&mut self, shared: Arc<Mutex<Vec<Tensor>>>, x: Tensor) -> Result<usize, Error> {
        ready().await;
        self.cache.push(&x + 1);
        shared.lock().unwrap().push(&x + 2);
        ready().await;
        Ok(self.cache.len())
    }
}

#[gpu_scope]
async fn plain(x: Tensor, n: Arc<Mutex<usize>>) -> Tensor {
    ready().await;
    *n.lock().unwrap() += 1;
    x + 1
}

/// A generic argument's share (`OwnShare<T>`) is `Send` where `T` is.
#[gpu_scope]
async fn generic<T: Tensors + Send>(value: T) -> usize {
    ready().await;
    drop(value);
    ready().await;
    1
}

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    let mut f = std::pin::pin!(f);
    let waker = std::task::Waker::noop();
    let mut cx = std::task::Context::from_waker(waker);
    loop {
        if let std::task::Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
    }
}

fn main() {
    let mut decoder = Decoder::default();
    let shared = Arc::new(Mutex::new(Vec::new()));
    let x = Tensor::zeros([2], tch::kind::FLOAT_CPU);
    let step = assert_send(decoder.step(Arc::clone(&shared), x.shallow_clone()));
    assert_eq!(block_on(step).unwrap(), 1);
    assert_eq!(shared.lock().unwrap().len(), 1);
    let n = Arc::new(Mutex::new(0));
    assert_eq!(block_on(assert_send(plain(x, Arc::clone(&n)))).size(), [2]);
    assert_eq!(*n.lock().unwrap(), 1);
    assert_eq!(block_on(assert_send(generic(Decoder::default()))), 1);
}
