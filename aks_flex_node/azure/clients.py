"""Azure management clients, built once per (service, subscription) and shared.

Every client talks to the configured cloud's ARM endpoint (`base_url`), asks for tokens
for that cloud's ARM scope, goes through the proxy (or not) as the run's HttpPolicy says
for the ARM host, ignores the environment's proxy variables (the config is the only
source, http_policy.py), trusts the configured CA bundle, and retries the way we want:
a throttled call waits as long as ARM's Retry-After says, a dead endpoint fails in
about half a minute instead of azure-core's default ten retries (RetryPolicy,
azure/core/pipeline/policies/_retry.py in Azure/azure-sdk-for-python).
"""

import random
import threading

from azure.core.pipeline.policies import RetryPolicy

from aks_flex_node.http_policy import HttpPolicy

# Connection failures: 3 attempts of at most CONNECTION_TIMEOUT s, waiting 0 s then
# BACKOFF_FACTOR s between them (azure-core's backoff is 0 for the first retry, then
# factor * 2^(n-1), azure-core's _retry.py): about 3 * 8 + 1 = 25 s for a black hole,
# well under a second for "connection refused".
RETRY_TOTAL = 5
RETRY_CONNECT = 2
RETRY_READ = 2
RETRY_STATUS = 4  # 429/5xx; with Retry-After, any status >= 400 (honoured as sent)
# 429 with a Retry-After is ARM's throttling asking us to wait (Learn, "Understand how Azure
# Resource Manager throttles requests": "If you send a request before the retry value has
# elapsed, your request isn't processed and a new retry value is returned"). Many nodes of
# one fleet share a subscription's token buckets, so one call can see many such answers in
# a row: they do not spend RETRY_STATUS/RETRY_TOTAL, CALL_TIMEOUT bounds them (and this
# cap, in case a service answers 429 with tiny waits forever).
RETRY_THROTTLED = 100
# Added to a 429's Retry-After: a fleet throttled at once would otherwise come back at once
# and empty the buckets again (the upstream agent jitters its listBootstrapData back-off
# too, Azure/AKSFlexNode pkg/bootstrapdata). Never less than ARM asked for.
THROTTLE_JITTER = 0.2  # up to this fraction of the wait...
THROTTLE_JITTER_MAX = 5.0  # ...and at most this many seconds
BACKOFF_FACTOR = 1.0
BACKOFF_MAX = 16
CONNECTION_TIMEOUT = 8
READ_TIMEOUT = 60
# Upper bound for one call including every retry and Retry-After wait.
CALL_TIMEOUT = 300
# LRO polling when the service sends no usable Retry-After: azure-core falls back to the
# client's polling_interval (default 30 s) even for "Retry-After: 0" (azure-core,
# azure/core/polling/base_polling.py _extract_delay), which would make a machine DELETE
# take half a minute for nothing.
POLLING_INTERVAL = 2


class ThrottleAwareRetryPolicy(RetryPolicy):
    """azure-core's RetryPolicy, except that a 429 carrying a wait (Retry-After, or the
    retry-after-ms variants azure-core reads) is waited out without spending the retry
    counts; the policy's absolute timeout still ends the call. Everything else (5xx,
    connection and read errors) retries exactly as RetryPolicy does."""

    def get_retry_after(self, response):
        wait = super().get_retry_after(response)
        http_response = getattr(response, "http_response", None)
        if wait and http_response is not None and http_response.status_code == 429:
            wait += random.uniform(0, min(wait * THROTTLE_JITTER, THROTTLE_JITTER_MAX))
        return wait

    def increment(self, settings, response=None, error=None):
        if error is None and _throttled(self, response):
            settings["throttled"] = settings.get("throttled", 0) + 1
            if settings["throttled"] <= RETRY_THROTTLED:
                for count in ("total", "status"):  # given back: RetryPolicy.increment takes them again
                    if settings[count] is not None:
                        settings[count] += 1
        return super().increment(settings, response=response, error=error)


def _throttled(policy, response):
    http_response = getattr(response, "http_response", None)
    return http_response is not None and http_response.status_code == 429 and bool(policy.get_retry_after(response))


class Clients:
    """Lazily built, thread-safe SDK clients for one cloud and one credential.

    `endpoints` has `.arm`, `.arm_scope` and `.ca_bundle` (config.CloudEndpoints); the
    Config object itself is accepted too (its `.endpoints`, and its HttpPolicy). `policy`
    (http_policy.HttpPolicy) decides the proxy; without one, connections are direct.
    """

    def __init__(self, endpoints, credential, policy=None, *, polling_interval=POLLING_INTERVAL,
                 retry_total=RETRY_TOTAL, backoff_factor=BACKOFF_FACTOR, call_timeout=CALL_TIMEOUT):
        if hasattr(endpoints, "endpoints"):  # the Config
            if policy is None:
                policy = HttpPolicy.from_config(endpoints)
            endpoints = endpoints.endpoints
        self.endpoints = endpoints
        self.credential = credential
        self.policy = policy if policy is not None else HttpPolicy(ca_bundle=endpoints.ca_bundle)
        # Every call of these clients goes to the ARM host (LRO polling included).
        self.proxies = self.policy.proxies_for(endpoints.arm)
        self.polling_interval = polling_interval
        self._retry = dict(
            retry_total=retry_total,
            retry_connect=RETRY_CONNECT,
            retry_read=RETRY_READ,
            retry_status=RETRY_STATUS,
            retry_backoff_factor=backoff_factor,
            retry_backoff_max=BACKOFF_MAX,
            timeout=call_timeout,
        )
        self._lock = threading.Lock()
        self._clients = {}

    def _options(self):
        options = dict(
            base_url=self.endpoints.arm,
            credential_scopes=[self.endpoints.arm_scope],
            connection_verify=self.endpoints.ca_bundle or True,
            connection_timeout=CONNECTION_TIMEOUT,
            read_timeout=READ_TIMEOUT,
            retry_policy=ThrottleAwareRetryPolicy(**self._retry),
            polling_interval=self.polling_interval,
            # requests' trust_env off: no proxy, no_proxy or REQUESTS_CA_BUNDLE from the
            # environment (azure-core, RequestsTransport use_env_settings).
            use_env_settings=False,
        )
        if self.proxies:
            options["proxies"] = self.proxies
        return options

    def _get(self, kind, subscription_id, factory):
        if not subscription_id:
            raise ValueError(f"subscription_id = {subscription_id!r}: expected a subscription GUID")
        key = (kind, subscription_id.lower())
        with self._lock:
            client = self._clients.get(key)
            if client is None:
                client = factory(self.credential, subscription_id, **self._options())
                self._clients[key] = client
            return client

    def hybridcompute(self, subscription_id):
        from azure.mgmt.hybridcompute import HybridComputeManagementClient

        return self._get("hybridcompute", subscription_id, HybridComputeManagementClient)

    def authorization(self, subscription_id):
        from azure.mgmt.authorization import AuthorizationManagementClient

        # Here, not at the top: sdk_compat imports azure.identity, which this module does not need.
        from aks_flex_node.azure.sdk_compat import authorization_options

        return self._get("authorization", subscription_id, lambda *args, **kwargs: AuthorizationManagementClient(
            *args, **kwargs, **authorization_options(AuthorizationManagementClient)))

    def containerservice(self, subscription_id):
        from azure.mgmt.containerservice import ContainerServiceClient

        return self._get("containerservice", subscription_id, ContainerServiceClient)

    def close(self):
        with self._lock:
            clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            client.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
