"""vllm-bridge's tools (`vllm-bridge doctor | explain | patches`): they
import the runtime; the runtime never imports them."""
