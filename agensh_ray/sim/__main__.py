import asyncio

from agensh_ray.sim.agent import main

asyncio.run(main())
