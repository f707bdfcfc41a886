package main

// tGatewayPool is gateway-local with its upstream a pool of three members,
// all three the same nginx: what is measured is the pool's own work
// (choosing a member, counting its health), on the same upstream capacity
// as gateway-local's one upstream.
const tGatewayPool = "gateway-local-pool3"

func init() {
	specs = append(specs, spec{tGatewayPool,
		"gateway-local with a pool of three members (round_robin, passive health) for its upstream, all three the same nginx", (*lab).gatewayTarget})
	gatewayConfigs[tGatewayPool] = gatewayConfig{Policy: pLocal, Pool: 3}
	informational = append(informational, [2]string{tGatewayPool, tGatewayLocal})
}
