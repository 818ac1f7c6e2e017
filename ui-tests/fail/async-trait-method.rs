// What `#[async_trait]` makes of `#[gpu_scope] async fn forward(&self, n: i64) -> i64` in a
// trait impl (async-trait expands first and keeps the attribute on the function it writes).
use std::future::Future;
use std::pin::Pin;

trait Model {
    fn forward<'life0, 'async_trait>(
        &'life0 self,
        n: i64,
    ) -> Pin<Box<dyn Future<Output = i64> + Send + 'async_trait>>
    where
        'life0: 'async_trait,
        Self: 'async_trait;
}

struct Linear;

impl Model for Linear {
    #[gpu_scope::gpu_scope]
    fn forward<'life0, 'async_trait>(
        &'life0 self,
        n: i64,
    ) -> Pin<Box<dyn Future<Output = i64> + Send + 'async_trait>>
    where
        'life0: 'async_trait,
        Self: 'async_trait,
    {
        Box::pin(async move { n })
    }
}

fn main() {
    let _ = Linear.forward(1);
}
