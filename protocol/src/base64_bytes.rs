//! Byte payloads travel as standard base64 with padding (RFC 4648).

use base64::Engine as _;
use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Raw bytes that serialize as a standard, padded base64 string.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Base64Bytes(pub Vec<u8>);

// Payloads are the bulk of the traffic, so the SIMD codec does the work; the `base64` crate only
// words the error for input the SIMD codec rejects (both accept exactly canonical, padded
// standard base64, see the tests).
impl Base64Bytes {
    pub fn encode(bytes: &[u8]) -> String {
        base64_simd::STANDARD.encode_to_string(bytes)
    }

    /// Appends the encoding of `bytes` to `text`.
    pub fn encode_into(bytes: &[u8], text: &mut String) {
        base64_simd::STANDARD.encode_append(bytes, text);
    }

    pub fn decode(text: &str) -> Result<Vec<u8>, base64::DecodeError> {
        base64_simd::STANDARD
            .decode_to_vec(text)
            .or_else(|_| base64::engine::general_purpose::STANDARD.decode(text))
    }
}

impl From<Vec<u8>> for Base64Bytes {
    fn from(bytes: Vec<u8>) -> Self {
        Self(bytes)
    }
}

impl Serialize for Base64Bytes {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&Self::encode(&self.0))
    }
}

impl<'de> Deserialize<'de> for Base64Bytes {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        Self::decode(&text)
            .map(Self)
            .map_err(|err| serde::de::Error::custom(format!("invalid base64: {err}")))
    }
}

impl JsonSchema for Base64Bytes {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Base64Bytes".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "string",
            "contentEncoding": "base64",
            "description": "Standard base64 (RFC 4648) with padding"
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_simd_codec_agrees_with_the_reference_codec() {
        let reference = &base64::engine::general_purpose::STANDARD;
        for len in 0..70 {
            let bytes: Vec<u8> = (0..len).map(|i| (i * 37 + len) as u8).collect();
            assert_eq!(Base64Bytes::encode(&bytes), reference.encode(&bytes));
        }
        let cases = [
            "",
            "QQ==",
            "QR==",
            "QQ",
            "QQ=",
            "QUI=",
            "QUJ=",
            "QUJD",
            "Q",
            "====",
            "QQ==QQ==",
            " QQ==",
            "QQ==\n",
            "QU-D",
            "QU_D",
            "QUJD\r\n",
            "Zm9v YmFy",
            "Zm9vYmFy",
            "Zm9vYmE=",
            "Zm9vYmE",
            "Zm9vYg==",
            "Zm9vYh==",
            "Zm9vYmFyZm9vYmFyZm9vYmFyZm9vYmFy",
        ];
        for case in cases {
            let simd = base64_simd::STANDARD.decode_to_vec(case).ok();
            assert_eq!(simd, reference.decode(case).ok(), "{case:?}");
        }
    }
}
