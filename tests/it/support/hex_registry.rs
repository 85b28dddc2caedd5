//! A Hex repository's registry documents as a repository encodes them
//! (hex_core's `hex_pb_signed.proto` and `hex_pb_package.proto`, with the
//! fields rebar3 requires), for the hex fixtures of both test targets.

use prost::Message as _;

#[derive(Clone, PartialEq, prost::Message)]
pub struct Signed {
    #[prost(bytes = "vec", required, tag = "1")]
    pub payload: Vec<u8>,
    #[prost(bytes = "vec", optional, tag = "2")]
    pub signature: Option<Vec<u8>>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Package {
    #[prost(message, repeated, tag = "1")]
    pub releases: Vec<Release>,
    #[prost(string, required, tag = "2")]
    pub name: String,
    #[prost(string, required, tag = "3")]
    pub repository: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Release {
    #[prost(string, required, tag = "1")]
    pub version: String,
    #[prost(bytes = "vec", required, tag = "2")]
    pub inner_checksum: Vec<u8>,
    #[prost(message, repeated, tag = "3")]
    pub dependencies: Vec<Dependency>,
    #[prost(bytes = "vec", optional, tag = "5")]
    pub outer_checksum: Option<Vec<u8>>,
    #[prost(message, optional, tag = "7")]
    pub published_at: Option<Timestamp>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Dependency {
    #[prost(string, required, tag = "1")]
    pub package: String,
    #[prost(string, required, tag = "2")]
    pub requirement: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Timestamp {
    #[prost(int64, required, tag = "1")]
    pub seconds: i64,
    #[prost(int32, required, tag = "2")]
    pub nanos: i32,
}

/// `bytes` gzipped, as the registry and tarball contents are.
pub fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    std::io::Write::write_all(&mut gz, bytes).unwrap();
    gz.finish().unwrap()
}

/// `packages/<name>` as served: `payload` and its `signature` in a
/// gzipped `Signed`.
pub fn signed(payload: Vec<u8>, signature: Vec<u8>) -> Vec<u8> {
    let signed = Signed {
        payload,
        signature: Some(signature),
    };
    gzip(&signed.encode_to_vec())
}
