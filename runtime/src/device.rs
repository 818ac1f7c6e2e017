//! A device as libtorch numbers it, printable and serialisable.
use serde::{Serialize, Serializer};
use std::fmt;

/// A device an allocation lives on: libtorch's device type number and index.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DeviceId {
    kind: i32,
    index: i32,
}

const CPU: i32 = 0;
const CUDA: i32 = 1;

impl DeviceId {
    /// The host.
    pub const CPU: DeviceId = DeviceId {
        kind: CPU,
        index: -1,
    };

    pub(crate) const fn from_raw(kind: i32, index: i32) -> Self {
        let index = if kind == CPU {
            -1
        } else if index < 0 {
            0
        } else {
            index
        };
        DeviceId { kind, index }
    }

    /// Whether this is the host rather than an accelerator.
    pub fn is_cpu(self) -> bool {
        self.kind == CPU
    }

    /// The accelerator index (0 for the host).
    pub fn index(self) -> i32 {
        self.index.max(0)
    }
}

impl From<tch::Device> for DeviceId {
    fn from(d: tch::Device) -> Self {
        match d {
            tch::Device::Cpu => DeviceId::CPU,
            tch::Device::Cuda(i) => DeviceId::from_raw(CUDA, i as i32),
            tch::Device::Mps => DeviceId::from_raw(13, 0),
            tch::Device::Vulkan => DeviceId::from_raw(10, 0),
        }
    }
}

impl fmt::Display for DeviceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self.kind {
            CPU => return f.write_str("cpu"),
            CUDA => "cuda",
            10 => "vulkan",
            12 => "xpu",
            13 => "mps",
            20 => "privateuseone",
            k => return write!(f, "device{k}:{}", self.index),
        };
        write!(f, "{name}:{}", self.index)
    }
}

impl Serialize for DeviceId {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}
